import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { defineConfig } from 'vitest/config';

/** What `npm run build:binary` writes; the binary project runs it instead of bin/receiver.js. */
export const BINARY = `dist/receiver-${process.platform}-${process.arch}`;

/**
 * The files that take longest, longest first. With no results cached (a fresh clone, as in
 * CI) vitest starts the largest files first, and some of the longest are small: started
 * last, one of them would run alone on one core at the end. They start first instead.
 */
const LONGEST = [
  'test/store/postgres-outage.test.ts',
  'test/cli/serve.test.ts',
  'test/drain/lanes.test.ts',
  'test/reliability/ops.test.ts',
  'test/cli/purge-replay-serve.test.ts',
  'test/cli/reload.test.ts',
  'test/admin/browser.test.ts',
  'test/reliability/crash.test.ts',
  'test/reliability/power-cut.test.ts',
  'test/store/postgres-faults.test.ts',
  'test/contrib/one-file-install.test.ts',
  'test/binary/executable.test.ts',
  'test/effects/hostile-modules.test.ts',
  'test/drain/heartbeat.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONGEST.indexOf(relative(f.project.config.root, f.moduleId));
      return i === -1 ? LONGEST.length : i;
    };
    // Stable: the rest keep vitest's order (failed first, then by duration or size).
    return sorted
      .map((f, i) => ({ f, i }))
      .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
      .map(({ f }) => f);
  }
}

export default defineConfig({
  test: {
    sequence: { sequencer: LongestFirst },
    // Global setups per project (a root one would run again in each project that extends it).
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Crash, lock and PostgreSQL tests use real processes and files; two workers on two cores.
    pool: 'forks',
    maxWorkers: 2,
    // Each worker imports src/ and the packages once for all the files it runs, instead of
    // once per file: a third of the suite's CPU time. So a test file leaves no global state
    // behind (environment variables, spies, module-level settings): it restores what it changed.
    isolate: false,
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
