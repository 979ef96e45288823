import js from "@eslint/js"
import { defineConfig, globalIgnores } from "eslint/config"
import tseslint from "typescript-eslint"

// ESLint's own defineConfig: typescript-eslint 8 deprecates its `tseslint.config` helper.
export default defineConfig(
  globalIgnores(["node_modules/", ".data/", "dist/", "packages/*/dist/", "profiling_reports/", "bench/results/", "bench/.baseline-js/"]),
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-namespace": "off",
      "require-yield": "off"
    }
  }
)
