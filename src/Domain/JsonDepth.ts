/**
 * JSON nested deeper than any request of this API needs. Such input is valid JSON, but Effect's
 * schema errors render the offending value recursively and overflow the stack on it, so it is
 * refused as a validation error before or instead of that (never a 500).
 */
export const MAX_JSON_DEPTH = 64

/** True when `value` (parsed JSON) nests arrays/objects more than `max` levels; iterative, stops early. */
export const depthExceeds = (value: unknown, max: number = MAX_JSON_DEPTH): boolean => {
  const stack: Array<{ readonly value: unknown; readonly depth: number }> = [{ value, depth: 0 }]
  while (stack.length > 0) {
    const { depth, value: current } = stack.pop()!
    if (typeof current !== "object" || current === null) continue
    if (depth + 1 > max) return true
    for (const child of Array.isArray(current) ? current : Object.values(current)) stack.push({ value: child, depth: depth + 1 })
  }
  return false
}

/** The same for JSON text, without parsing it. */
export const textDepthExceeds = (text: string, max: number = MAX_JSON_DEPTH): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return false
}

export const tooDeepMessage = `Input is nested more than ${MAX_JSON_DEPTH} levels deep`
