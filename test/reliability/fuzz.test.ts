import { afterAll, describe, expect, it } from 'vitest';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { makeConfig, startApp, startServe, tempDir, writeConfig } from '../helpers.js';
import { fuzzSources, makeSigner } from './fuzz-cases.js';
import { runFuzz } from './fuzz.js';
import { LONG, printReport, printSeedOnFailure, SECRET_ENV, SIZES, TEST_TIMEOUT_MS } from './harness.js';

const MAX_BODY = 64 * 1024;
const settings = { sources: fuzzSources, maxBodyBytes: MAX_BODY, drain: { enabled: false } };

describe('reliability: hostile input at the HTTP layer', () => {
  const tmp = tempDir('receiver-fuzz-');
  afterAll(tmp.cleanup);

  it(
    `in-process server: the corpus and ${LONG ? 1000 : SIZES.fuzz} generated cases: no 5xx, no hang, nothing stored unsigned, valid deliveries still 202`,
    async () => {
      printSeedOnFailure('test/reliability/fuzz.test.ts');
      const dir = join(tmp.dir, 'app');
      mkdirSync(dir);
      const config = makeConfig(settings, dir, SECRET_ENV);
      // Unexpected errors (what would be a 500) are reported here.
      const errors: unknown[] = [];
      const app = await startApp(config, { onError: (e) => errors.push(e) });
      try {
        const report = await runFuzz(
          { url: app.url, port: Number(new URL(app.url).port), dbPath: config.database, alive: () => true },
          {
            generated: LONG ? 1000 : SIZES.fuzz,
            seed: SIZES.seed,
            sign: makeSigner(config.sources, app.url),
            maxBodyBytes: MAX_BODY,
            concurrency: 8,
            validEvery: 10,
            deadline: Date.now() + TEST_TIMEOUT_MS - 10_000,
          },
        );
        printReport(`fuzz, in-process server (seed ${SIZES.seed})`, report);
        expect(report.violations).toEqual([]);
        expect(errors.map((e) => String(e))).toEqual([]);
        expect(report.validAccepted).toBe(report.validSent);
      } finally {
        await app.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    `receiver serve child: the corpus and ${LONG ? SIZES.fuzz : 0} generated cases; the process survives and logs no request failure`,
    async () => {
      printSeedOnFailure('test/reliability/fuzz.test.ts');
      const dir = join(tmp.dir, 'serve');
      mkdirSync(dir);
      const file = writeConfig(dir, settings);
      const config = makeConfig(settings, dir, SECRET_ENV);
      const serve = await startServe(file, { env: SECRET_ENV });
      let exit: number | null = null;
      try {
        const report = await runFuzz(
          { url: serve.url, port: serve.port, dbPath: join(dir, 'receiver.db'), alive: () => serve.child.exitCode === null && serve.child.signalCode === null },
          {
            generated: LONG ? SIZES.fuzz : 0,
            seed: SIZES.seed + 1,
            sign: makeSigner(config.sources, serve.url),
            maxBodyBytes: MAX_BODY,
            concurrency: 8,
            validEvery: 10,
            deadline: Date.now() + TEST_TIMEOUT_MS - 10_000,
          },
        );
        printReport(`fuzz, receiver serve (seed ${SIZES.seed + 1})`, report);
        expect(report.violations).toEqual([]);
        expect(report.validAccepted).toBe(report.validSent);
      } finally {
        exit = await serve.stop();
      }
      expect(exit).toBe(0);
      const failures = serve
        .output()
        .stderr.split('\n')
        .filter((l) => /"level":"(error|fatal)"/.test(l));
      expect(failures).toEqual([]);
    },
    TEST_TIMEOUT_MS,
  );
});
