import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Crash, lock and PostgreSQL tests use real processes and files; two workers on two cores.
    pool: 'forks',
    maxWorkers: 2,
  },
});
