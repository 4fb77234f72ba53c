#!/usr/bin/env node
/**
 * npm run mutate: a small mutation check of the lines that carry the guarantees. Each
 * mutant is one textual change to one line of src/ (a check deleted, a boundary moved, an
 * answer changed); it is applied to a copy of the repository (the tracked files, with this
 * checkout's node_modules linked in), only the test files that guard that line are run
 * there, and the mutant is killed when they fail. Prints each mutant's fate and the totals;
 * exits 1 when any survived. Not part of `npm test` (minutes of CPU).
 *
 *   npm run mutate                 every mutant
 *   npm run mutate -- lease purge  the mutants whose name contains one of the words
 *
 * PostgreSQL tests need RECEIVER_TEST_POSTGRES_URL, as for the suite.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const REPO = new URL('..', import.meta.url).pathname;

/** name, file, the exact text replaced (must occur once), its replacement, the test files that must fail. */
const MUTANTS = [
  {
    name: 'signature: any presented signature matches',
    file: 'src/providers/util.ts',
    from: 'for (const p of presented) if (safeEqual(p, want)) ok = true;',
    to: 'for (const p of presented) if (safeEqual(p, want) || p.length > 0) ok = true;',
    tests: ['test/providers/vectors.test.ts', 'test/providers/catalogue.test.ts'],
  },
  {
    name: 'timestamp: tolerance check removed',
    file: 'src/providers/util.ts',
    from: 'if (age > tolerance) throw',
    to: 'if (age > Infinity) throw',
    tests: ['test/providers/catalogue.test.ts'],
  },
  {
    name: 'timestamp: tolerance boundary moved by a second',
    file: 'src/providers/util.ts',
    from: 'if (age > tolerance) throw',
    to: 'if (age > tolerance + 1) throw',
    tests: ['test/providers/catalogue.test.ts'],
  },
  {
    name: 'dedupe decision: a changed body is the same event',
    file: 'src/store/catch-up-types.ts',
    from: "return stored.body_sha256 === incomingSha256 || stored.origin === 'catch-up';",
    to: 'return true;',
    tests: ['test/store/contract.test.ts', 'test/providers/mailwebhook.test.ts'],
  },
  {
    name: 'dedupe decision: the same body is a conflict',
    file: 'src/store/catch-up-types.ts',
    from: "return stored.body_sha256 === incomingSha256 || stored.origin === 'catch-up';",
    to: "return stored.origin === 'catch-up';",
    tests: ['test/store/contract.test.ts', 'test/providers/mailwebhook.test.ts'],
  },
  {
    name: 'duplicate answer (SQLite): not the stored answer',
    file: 'src/store/sqlite/ingest.ts',
    from: "return { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: row.response_body };",
    to: "return { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: acceptedAnswer(row.id).replace('}', ',\"duplicate\":true}') };",
    tests: ['test/store/contract.test.ts', 'test/providers/catalogue.test.ts'],
  },
  {
    name: 'duplicate answer (PostgreSQL): not the stored answer',
    file: 'src/store/postgres/ingest.ts',
    from: "results[i] = { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: row.response_body };",
    to: "results[i] = { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: acceptedAnswer(row.id).replace('}', ',\"duplicate\":true}') };",
    tests: ['test/store/contract.test.ts'],
  },
  {
    name: 'conflict (SQLite): 202 instead of 409',
    file: 'src/store/sqlite/ingest.ts',
    from: "return { outcome: 'conflict', eventId: row.id, status: 409, body: conflictAnswer(row.id, e.deliveryId) };",
    to: "return { outcome: 'conflict', eventId: row.id, status: 202, body: conflictAnswer(row.id, e.deliveryId) };",
    tests: ['test/store/contract.test.ts', 'test/providers/mailwebhook.test.ts'],
  },
  {
    name: 'conflict (PostgreSQL): 202 instead of 409',
    file: 'src/store/postgres/ingest.ts',
    from: ": { outcome: 'conflict', eventId: row.id, status: 409, body: conflictAnswer(row.id, e.deliveryId) };",
    to: ": { outcome: 'conflict', eventId: row.id, status: 202, body: conflictAnswer(row.id, e.deliveryId) };",
    tests: ['test/store/contract.test.ts'],
  },
  {
    name: 'ledger decision: a done key runs again',
    file: 'src/store/drain/ledger.ts',
    from: "  return 'skipped';\n}",
    to: "  return 'run';\n}",
    tests: ['test/store/ledger.test.ts', 'test/store/contract.test.ts'],
  },
  {
    name: 'ledger decision: --force ignored',
    file: 'src/store/drain/ledger.ts',
    from: "  if (start.force) return 'run';\n",
    to: '',
    tests: ['test/store/ledger.test.ts', 'test/store/contract.test.ts'],
  },
  {
    name: 'ledger decision: a key running elsewhere is run again',
    file: 'src/store/drain/ledger.ts',
    from: "if (row.status === 'running' && row.heldElsewhere) return 'busy';",
    to: "if (row.status === 'running' && row.heldElsewhere) return 'run';",
    tests: ['test/store/ledger.test.ts', 'test/store/contract.test.ts'],
  },
  {
    name: 'lease guard: any owner may write',
    file: 'src/store/drain/lease.ts',
    from: "`id = ${p()} AND lease_owner = ${p()} AND status = 'processing'`",
    to: "`id = ${p()} AND (lease_owner = ${p()} OR 1 = 1) AND status = 'processing'`",
    tests: ['test/store/contract.test.ts', 'test/drain/lease.test.ts'],
  },
  // Not a mutant here: the guard without `status = 'processing'`. Every write that ends a
  // claim (settle, replay, release) also sets lease_owner to NULL, so the owner check alone
  // already refuses a settled unit: the two guard each other, and no test can tell one gone.
  {
    name: 'lease guard: a claim taken before its lease ran out',
    file: 'src/store/drain/claim.ts',
    from: "WHERE status = 'processing' AND lease_expires_at <= ${p()}",
    to: "WHERE status = 'processing' AND lease_expires_at <= ${p()} + 1000",
    tests: ['test/store/contract.test.ts', 'test/drain/lease.test.ts'],
  },
  {
    name: 'purge horizon: --days equal to the horizon refused',
    file: 'src/cli/purge.ts',
    from: 'options.days * 24 < horizon.hours',
    to: 'options.days * 24 <= horizon.hours',
    tests: ['test/cli/purge.test.ts'],
  },
  {
    name: 'purge horizon: guard removed',
    file: 'src/cli/purge.ts',
    from: 'options.days * 24 < horizon.hours',
    to: 'options.days * 24 < 0',
    tests: ['test/cli/purge.test.ts'],
  },
  {
    name: 'fdatasync before an external effect acts: no sync',
    file: 'src/store/sqlite/drain-backend.ts',
    from: 'await this.#c.wal?.sync();',
    to: 'void 0;',
    tests: ['test/store/wal-sync.test.ts'],
  },
  {
    name: 'PostgreSQL: a row purged between insert and read answered from nothing',
    file: 'src/store/postgres/ingest.ts',
    from: 'if (vanished.length > 0) {',
    to: 'if (vanished.length > 0 && vanished.length < 0) {',
    tests: ['test/store/redelivery.test.ts'],
  },
];

const only = process.argv.slice(2);
const chosen = MUTANTS.filter((m) => only.length === 0 || only.some((w) => m.name.includes(w)));

/** A copy of the tracked files (as they are in this checkout) with node_modules linked in. */
function copyRepository() {
  const dir = mkdtempSync(join(tmpdir(), 'receiver-mutate-'));
  const files = spawnSync('git', ['ls-files', '-z'], { cwd: REPO, encoding: 'utf8' }).stdout.split('\0').filter(Boolean);
  for (const f of files) {
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    try {
      cpSync(join(REPO, f), join(dir, f));
    } catch {
      // A tracked file deleted in this checkout.
    }
  }
  symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

function runTests(dir, tests) {
  const started = Date.now();
  const r = spawnSync(process.execPath, [join(REPO, 'node_modules/vitest/vitest.mjs'), 'run', '--project', 'node', '--bail', '1', ...tests], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, CI: '1' },
    maxBuffer: 64 * 1024 * 1024,
  });
  return { ok: r.status === 0, ms: Date.now() - started, output: `${r.stdout}${r.stderr}` };
}

const dir = copyRepository();
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
let killed = 0;
const survived = [];
const t0 = Date.now();
for (const m of chosen) {
  const path = join(dir, m.file);
  const original = readFileSync(path, 'utf8');
  const at = original.indexOf(m.from);
  if (at < 0 || original.indexOf(m.from, at + 1) >= 0) {
    console.log(`ERROR     ${m.name}: the text to mutate is not in ${m.file} exactly once (the line moved: update scripts/mutate.mjs)`);
    survived.push(m.name);
    continue;
  }
  writeFileSync(path, original.slice(0, at) + m.to + original.slice(at + m.from.length));
  try {
    const r = runTests(dir, m.tests);
    if (r.ok) survived.push(m.name);
    else killed += 1;
    console.log(`${r.ok ? 'SURVIVED' : 'killed  '}  ${m.name}  (${m.file}; ${m.tests.join(' ')}; ${(r.ms / 1000).toFixed(0)} s)`);
  } finally {
    writeFileSync(path, original);
  }
}
console.log(`\n${chosen.length} mutants: ${killed} killed, ${survived.length} survived (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
for (const s of survived) console.log(`  survived: ${s}`);
process.exitCode = survived.length === 0 ? 0 : 1;
