import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
    // Two cores: keep parallelism modest so process-spawning tests do not starve each other.
    maxWorkers: 2,
  },
});
