import { defineConfig } from 'vitest/config';

/** What `npm run build:binary` writes; the binary project runs it instead of bin/receiver.js. */
export const BINARY = `dist/receiver-${process.platform}-${process.arch}`;

export default defineConfig({
  test: {
    // Global setups per project (a root one would run again in each project that extends it).
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Crash, lock and PostgreSQL tests use real processes and files; two workers on two cores.
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/binary/executable.test.ts', 'test/contrib/one-file-install.test.ts'],
          globalSetup: ['test/global-setup.ts'],
        },
      },
      {
        // The single executable, through the same subprocess helpers (test/helpers.ts), from a
        // directory without node_modules and with no node on PATH: what only the executable
        // does, and one end-to-end session through it (test/binary/executable.test.ts: serve,
        // ingest, exec/http/module effects, a module host killed at its timeout, SIGTERM,
        // every subcommand, PostgreSQL), the one-file install, and the drain thread's wake-ups
        // across the executable's threads. The rest of the CLI runs in the node project: the
        // executable runs the same code, bundled.
        extends: true,
        test: {
          name: 'binary',
          include: ['test/binary/executable.test.ts', 'test/contrib/one-file-install.test.ts', 'test/drain/thread.test.ts'],
          globalSetup: ['test/binary/global-setup.ts'],
          env: { RECEIVER_TEST_BINARY: BINARY },
        },
      },
    ],
  },
});
