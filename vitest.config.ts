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
        // directory without node_modules and with no node on PATH: every subcommand, serve,
        // SIGTERM, PostgreSQL, and what only the executable does (test/binary/).
        extends: true,
        test: {
          name: 'binary',
          include: [
            'test/binary/executable.test.ts',
            'test/contrib/one-file-install.test.ts',
            'test/cli/version.test.ts',
            'test/cli/serve.test.ts',
            'test/cli/check-config.test.ts',
            'test/cli/backup.test.ts',
            'test/cli/events.test.ts',
            'test/cli/replay.test.ts',
            'test/cli/purge.test.ts',
            'test/cli/stats.test.ts',
            'test/cli/no-database.test.ts',
            'test/secrets-leak.test.ts',
            'test/store/postgres-serve.test.ts',
            'test/drain/thread.test.ts',
            'test/effects/hostile-modules.test.ts',
            'test/catchup/serve.test.ts',
          ],
          globalSetup: ['test/binary/global-setup.ts'],
          env: { RECEIVER_TEST_BINARY: BINARY },
        },
      },
    ],
  },
});
