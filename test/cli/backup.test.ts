import { spawn, spawnSync } from 'node:child_process';
import { chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { verifyBackup } from '../../src/store/sqlite/backup.js';
import { LATEST_VERSION } from '../../src/store/sqlite/migrations.js';
import { post, receiverCommand, runCli, runInProcess, startServe, tempDir, writeConfig } from '../helpers.js';
import { insertEvent, seedDb } from '../store/ops-seed.js';

/** `receiver backup <file>`: a consistent, checked copy of a running receiver's SQLite database. */
describe('receiver backup', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let n = 0;
  /** A directory with a configuration, a seeded database holding `events` events, and a backups/ directory. */
  const setup = (events = 3) => {
    n += 1;
    const dir = join(tmp.dir, String(n));
    mkdirSync(join(dir, 'backups'), { recursive: true });
    const config = writeConfig(dir, { sources: { t: { provider: 'none', deliveryId: '{body.id}' } } });
    const db = seedDb(join(dir, 'receiver.db'));
    for (let i = 0; i < events; i += 1) insertEvent(db, { deliveryId: `evt_${i}`, eventType: 'test', status: 'done', receivedAt: Date.UTC(2026, 0, 1) + i });
    db.close();
    return { dir, config, backups: join(dir, 'backups') };
  };
  const countEvents = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
    } finally {
      db.close();
    }
  };
  const at = Date.UTC(2026, 2, 1, 2, 30, 0);

  it('copies the database while serve is storing deliveries: the copy passes integrity_check, has the rows acknowledged before it started, and restores', async () => {
    const { dir, config, backups } = setup(0);
    const server = await startServe(config);
    let acked = 0;
    let next = 0;
    let writing = true;
    const writer = async () => {
      while (writing) {
        next += 1;
        const r = await post(`${server.url}/webhooks/t`, JSON.stringify({ id: `evt_${next}` }));
        expect(r.status).toBe(202);
        acked += 1;
      }
    };
    const writers = [writer(), writer(), writer(), writer()];
    try {
      while (acked < 200) await new Promise((r) => setTimeout(r, 20));
      const before = acked;
      const copy = join(backups, 'live.db');
      const r = await runCli(['backup', copy, '-c', config]);
      const after = acked;
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      // Deliveries went on being stored while the copy was made: the copy is one snapshot in between.
      const rows = countEvents(copy);
      expect(rows).toBeGreaterThanOrEqual(before);
      // A row committed before the snapshot may still have its 202 on the way: one per writer at most.
      expect(rows).toBeLessThanOrEqual(after + writers.length);
      // A copy holds every stored body: readable by its owner only.
      expect(statSync(copy).mode & 0o777).toBe(0o600);
      expect(r.stdout).toMatch(
        new RegExp(
          `^wrote ${copy} \\([\\d.]+ KiB, schema version ${LATEST_VERSION}, integrity ok\\): ${rows} events, 0 effects, 0 attempts, 0 conflicts$`,
          'm',
        ),
      );
      const check = new Database(copy, { readonly: true });
      expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(check.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
      check.close();
      // Only the copy: no -wal, -shm or temporary file beside it.
      expect(readdirSync(backups)).toEqual(['live.db']);

      // The restore of docs/operations.md: the copy put in place of a database, opened by receiver.
      const restored = join(dir, 'restored');
      mkdirSync(restored);
      copyFileSync(copy, join(restored, 'receiver.db'));
      const list = await runInProcess(['events', 'list', '-c', config, '--db', join(restored, 'receiver.db'), '--json', '--limit', '1000']);
      expect(list.code).toBe(0);
      expect((JSON.parse(list.stdout) as unknown[]).length).toBe(rows);
    } finally {
      writing = false;
      await Promise.all(writers);
      expect(await server.stop()).toBe(0);
    }
  });

  it('refuses to overwrite an existing file (exit 1, the file untouched); --force replaces it', async () => {
    const { config, backups } = setup(3);
    const copy = join(backups, 'receiver.db');
    writeFileSync(copy, 'an older backup');
    const refused = await runCli(['backup', copy, '-c', config]);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toContain(`Error: ${copy} already exists; nothing was written`);
    expect(refused.stderr).toMatch(/^Try: pass --force to replace it/m);
    expect(readFileSync(copy, 'utf8')).toBe('an older backup');

    const forced = await runInProcess(['backup', copy, '-c', config, '--force']);
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain('replaced the earlier receiver.db (--force)');
    expect(countEvents(copy)).toBe(3);
    expect(readdirSync(backups)).toEqual(['receiver.db']);
  });

  it('{date} and {datetime} become the UTC date and time; --keep N keeps the N newest copies named so and nothing else is touched', async () => {
    const { config, backups } = setup(2);
    const others = ['receiver-2026-02-26.db', 'receiver-2026-02-27.db', 'receiver-2026-02-28.db', 'receiver-latest.db', 'other-2026-01-01.db', 'notes.txt'];
    for (const f of others) writeFileSync(join(backups, f), 'x');
    mkdirSync(join(backups, 'receiver-2020-01-01.db')); // a directory, never removed
    const r = await runInProcess(['backup', join(backups, 'receiver-{date}.db'), '--keep', '2', '-c', config], { now: () => at });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`wrote ${join(backups, 'receiver-2026-03-01.db')} (`);
    expect(r.stdout).toContain(`removed ${join(backups, 'receiver-2026-02-26.db')}`);
    expect(r.stdout).toContain(`removed ${join(backups, 'receiver-2026-02-27.db')}`);
    expect(r.stdout).toContain('kept the 2 newest copies named like receiver-{date}.db');
    expect(readdirSync(backups).sort()).toEqual(
      ['notes.txt', 'other-2026-01-01.db', 'receiver-2020-01-01.db', 'receiver-2026-02-28.db', 'receiver-2026-03-01.db', 'receiver-latest.db'].sort(),
    );
    expect(countEvents(join(backups, 'receiver-2026-03-01.db'))).toBe(2);

    // The same day again: refused, the name says why; {datetime} keeps several a day.
    const again = await runInProcess(['backup', join(backups, 'receiver-{date}.db'), '-c', config], { now: () => at + 60_000 });
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/use \{datetime\} in the name to keep several copies a day/);
    for (const minute of [0, 1, 2]) {
      const t = await runInProcess(['backup', join(backups, 'hourly-{datetime}.db'), '--keep', '2', '-c', config], { now: () => at + minute * 60_000 });
      expect(t.code).toBe(0);
    }
    expect(readdirSync(backups).filter((f) => f.startsWith('hourly-'))).toEqual(['hourly-2026-03-01T023100Z.db', 'hourly-2026-03-01T023200Z.db']);
  });

  it('refuses --keep without a placeholder, the database itself as the target, and a missing directory; nothing is written', async () => {
    const { dir, config, backups } = setup(1);
    const cases: [string[], number, RegExp][] = [
      [[join(backups, 'fixed.db'), '--keep', '3'], 2, /--keep needs \{date\} or \{datetime\} in the file name/],
      [[join(dir, 'receiver.db'), '--force'], 2, /is the database itself/],
      [[join(dir, 'nowhere', 'copy.db')], 1, /the directory .*nowhere does not exist/],
      [[join(backups, 'x.db'), '--keep', '0'], 2, /--keep must be a positive whole number/],
    ];
    for (const [args, code, message] of cases) {
      const r = await runInProcess(['backup', ...args, '-c', config]);
      expect(r.code).toBe(code);
      expect(r.stderr).toMatch(message);
    }
    expect(readdirSync(backups)).toEqual([]);
    expect(countEvents(join(dir, 'receiver.db'))).toBe(1);
  });

  it('refuses a target that resolves to the database or its -wal through a symbolic link, in the file, its directory or a parent; the database stays as it was', async () => {
    // The database as the configuration names it may itself be a link (as in a move to a
    // bigger disk): var/data/receiver.db is the file, etc-db.db the name configured.
    const { dir, backups } = setup(5);
    mkdirSync(join(dir, 'var/data'), { recursive: true });
    copyFileSync(join(dir, 'receiver.db'), join(dir, 'var/data/receiver.db'));
    const real = join(dir, 'var/data/receiver.db');
    symlinkSync(real, join(dir, 'etc-db.db'));
    symlinkSync(join(dir, 'var/data'), join(dir, 'datalink'));
    symlinkSync(join(dir, 'var'), join(dir, 'varlink'));
    symlinkSync(real, join(backups, 'latest.db'));
    symlinkSync(`${real}-wal`, join(backups, 'wal-link.db'));
    const config = writeConfig(dir, { database: join(dir, 'etc-db.db'), sources: { t: { provider: 'none', deliveryId: '{body.id}' } } });
    const inode = statSync(real).ino;
    const cases: [string, RegExp][] = [
      [real, /var\/data\/receiver\.db is the database itself/], // the file the configured link points at
      [join(dir, 'datalink/receiver.db'), /resolves to .*var\/data\/receiver\.db, the database itself/], // its directory through a link
      [join(dir, 'varlink/data/receiver.db'), /resolves to .*var\/data\/receiver\.db, the database itself/], // a parent directory through a link
      [`${real}-wal`, /the database's -wal file/], // the -wal name, not there yet
      [join(dir, 'datalink/receiver.db-shm'), /the database's -shm file/],
      [join(backups, 'latest.db'), /backups\/latest\.db resolves to .*var\/data\/receiver\.db, the database itself/], // the target a link to it
      [join(backups, 'wal-link.db'), /the database's -wal file/], // a link to where the -wal would be
    ];
    for (const [i, [target, message]] of cases.entries()) {
      // The first as a process (the case), the others in process (the same code, faster).
      const r = await (i === 0 ? runCli : runInProcess)(['backup', target, '--force', '-c', config]);
      expect(r.stderr, target).toMatch(message);
      expect(r.stderr).toMatch(/nothing was written\nTry: name a file in a backup directory/);
      expect(r.code).toBe(2);
    }
    // Not replaced (same inode), no -wal made up, no partial copy anywhere, the links untouched.
    expect(statSync(real).ino).toBe(inode);
    expect(readdirSync(join(dir, 'var/data'))).toEqual(['receiver.db']);
    expect(countEvents(real)).toBe(5);
    expect(readdirSync(backups).sort()).toEqual(['latest.db', 'wal-link.db']);
    expect(lstatSync(join(backups, 'latest.db')).isSymbolicLink()).toBe(true);
    // A copy beside the links is fine.
    const ok = await runInProcess(['backup', join(dir, 'datalink/copy.db'), '-c', config]);
    expect(ok.code).toBe(0);
    expect(countEvents(join(dir, 'var/data/copy.db'))).toBe(5);
  });

  it('a backup killed mid-copy leaves its partial copy and journal; the next run removes them, and only them', async () => {
    const { dir, config, backups } = setup(3);
    // 40 MB more to copy: VACUUM INTO runs long enough to be killed in the middle.
    const db = new Database(join(dir, 'receiver.db'));
    db.exec(
      'CREATE TABLE pad (b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) INSERT INTO pad SELECT randomblob(4096) FROM n',
    );
    db.close();
    const run = receiverCommand(['backup', join(backups, 'receiver-{date}.db'), '-c', config], {});
    const child = spawn(run.file, run.args, { cwd: run.cwd, env: run.env, stdio: 'ignore' });
    const exited = new Promise((r) => child.once('exit', r));
    const partial = /^\.receiver-\d{4}-\d{2}-\d{2}\.db\.partial-\d+-\d+$/;
    const until = Date.now() + 15_000;
    // Killed once the copy and its journal both exist: in the middle of the copy.
    const copying = () => {
      const files = readdirSync(backups);
      return files.some((f) => partial.test(f)) && files.some((f) => f.endsWith('-journal'));
    };
    while (!copying() && Date.now() < until) await new Promise((r) => setTimeout(r, 2));
    child.kill('SIGKILL');
    await exited;
    const left = readdirSync(backups);
    expect(left.filter((f) => partial.test(f))).toHaveLength(1);
    expect(left.some((f) => f.endsWith('-journal'))).toBe(true);

    // Files that are not the leftovers of this backup: another run's copy in progress (its
    // process alive), other names, a directory, a link (another user's file: the next test).
    const dead = spawnSync('true').pid;
    const foreign = [
      `.receiver-2026-02-28.db.partial-${process.pid}-1`,
      '.receiver-2026-02-28.db.partial-notes',
      `.receiver-2026-02-28.db.partial-${dead}-1.bak`,
      `.other-2026-02-28.db.partial-${dead}-1`,
      `receiver-2026-02-28.db.partial-${dead}-1`,
    ];
    for (const f of foreign) writeFileSync(join(backups, f), 'not a leftover of this backup');
    mkdirSync(join(backups, `.receiver-2026-02-27.db.partial-${dead}-1`));
    symlinkSync(join(dir, 'receiver.db'), join(backups, `.receiver-2026-02-26.db.partial-${dead}-1`));

    const r = await runCli(['backup', join(backups, 'receiver-{date}.db'), '-c', config]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const removed = left.filter((f) => f.startsWith('.'));
    for (const f of removed) expect(r.stdout).toContain(`removed ${join(backups, f)} (left by a backup that was killed)`);
    const now = readdirSync(backups);
    for (const f of removed) expect(now).not.toContain(f);
    for (const f of [...foreign, `.receiver-2026-02-27.db.partial-${dead}-1`, `.receiver-2026-02-26.db.partial-${dead}-1`]) expect(now).toContain(f);
    expect(now.filter((f) => /^receiver-\d{4}-\d{2}-\d{2}\.db$/.test(f))).toHaveLength(1);
    expect(countEvents(join(dir, 'receiver.db'))).toBe(3);
  });

  it("a leftover of another user stays; this user's own is removed", async (ctx) => {
    if (process.geteuid?.() !== 0) ctx.skip('making a file of another user needs root (this run is not root)');
    const { config, backups } = setup(1);
    const dead = spawnSync('true').pid;
    const own = `.receiver-2026-02-24.db.partial-${dead}-1`;
    const others = `.receiver-2026-02-25.db.partial-${dead}-1`;
    for (const f of [own, others]) writeFileSync(join(backups, f), 'x');
    chownSync(join(backups, others), 65534, 65534);
    const r = await runInProcess(['backup', join(backups, 'receiver-{date}.db'), '-c', config]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`removed ${join(backups, own)} (left by a backup that was killed)`);
    expect(readdirSync(backups)).not.toContain(own);
    expect(readdirSync(backups)).toContain(others);
  });

  it.skipIf(spawnSync('script', ['--version']).status !== 0)(
    'on a terminal it draws its progress on stderr (from a thread: the copy holds the main one) and clears it; elsewhere nothing',
    async () => {
      const { config, backups } = setup(2);
      const run = receiverCommand(['backup', join(backups, 'tty.db'), '-c', config], {});
      const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
      // script(1) runs the command on a pseudo-terminal and copies what it wrote.
      const r = spawnSync('script', ['-qfec', [run.file, ...run.args].map(quote).join(' '), '/dev/null'], { cwd: run.cwd, env: run.env, encoding: 'utf8' });
      expect(r.status).toBe(0);
      const clear = '\r\x1b[K';
      expect(r.stdout).toContain(`${clear}copying receiver.db: `);
      expect(r.stdout).toMatch(/copying receiver\.db: [\d.]+ MiB of at most [\d.]+ MiB \(\d+%\)/);
      // Cleared before the result is printed.
      expect(r.stdout).toContain(`${clear}wrote ${join(backups, 'tty.db')} (`);
      const plain = await runCli(['backup', join(backups, 'pipe.db'), '-c', config]);
      expect(plain.stderr).toBe('');
    },
  );

  it('a failed copy leaves nothing behind and exits 1: a database file that is not a database, a missing database', async () => {
    const { dir, config, backups } = setup(0);
    writeFileSync(join(dir, 'receiver.db'), 'not a database, but long enough to look like a header...'.repeat(20));
    const r = await runCli(['backup', join(backups, 'copy.db'), '-c', config]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^Error: .*receiver\.db is not a SQLite database/m);
    expect(readdirSync(backups)).toEqual([]);

    const missing = await runInProcess(['backup', join(backups, 'copy.db'), '-c', config, '--db', join(dir, 'none.db')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^Error: no database at .*none\.db/m);
    expect(existsSync(join(dir, 'none.db'))).toBe(false);
    expect(readdirSync(backups)).toEqual([]);
  });

  it('the copy check refuses a copy at another schema version and a corrupt copy', () => {
    const { dir } = setup(50);
    expect(() => verifyBackup(join(dir, 'receiver.db'), LATEST_VERSION + 1)).toThrow(/is at schema version \d+, the database at \d+/);
    // Overwrite the middle of the file (table and index pages) with garbage.
    const bytes = readFileSync(join(dir, 'receiver.db'));
    bytes.fill(0x41, 4096 * 2, bytes.length - 1);
    const corrupt = join(dir, 'corrupt.db');
    writeFileSync(corrupt, bytes);
    expect(() => verifyBackup(corrupt, LATEST_VERSION)).toThrow(/failed its integrity check/);
  });

  it('on PostgreSQL it refuses and names pg_dump (exit 2)', async () => {
    const { config, backups } = setup(0);
    const r = await runInProcess(['backup', join(backups, 'x.db'), '-c', config, '--db', 'postgres://receiver:s3cret@127.0.0.1:5432/receiver']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Error: receiver backup copies a SQLite database; postgres://receiver:***@127.0.0.1:5432/receiver is PostgreSQL');
    expect(r.stderr).toMatch(/^Try: back it up with pg_dump/m);
    expect(r.stderr).not.toContain('s3cret');
    expect(readdirSync(backups)).toEqual([]);
  });
});
