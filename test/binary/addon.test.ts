import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { addonDir, addonFile, ensurePrivateDir, loadAddon } from '../../src/binary/addon.js';
import { ReceiverError } from '../../src/errors.js';
import { tempDir } from '../helpers.js';

/** The executable's addon loader, in process, on the real better_sqlite3.node. */

const require = createRequire(import.meta.url);
const bytes = readFileSync(join(dirname(require.resolve('better-sqlite3/package.json')), 'build/Release/better_sqlite3.node'));
const sha256 = createHash('sha256').update(bytes).digest('hex');

function refusal(fn: () => unknown): ReceiverError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ReceiverError);
    return e as ReceiverError;
  }
  throw new Error('expected a refusal');
}

describe('the single executable: better-sqlite3 addon on disk', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let k = 0;
  const fresh = () => join(tmp.dir, String(++k));

  it('addonDir: RECEIVER_NATIVE_DIR, then XDG_CACHE_HOME/receiver, then ~/.cache/receiver, else a config error', () => {
    expect(addonDir({ RECEIVER_NATIVE_DIR: '/n', XDG_CACHE_HOME: '/x', HOME: '/h' })).toBe('/n');
    expect(addonDir({ XDG_CACHE_HOME: '/x', HOME: '/h' })).toBe('/x/receiver');
    expect(addonDir({ HOME: '/var/lib/receiver' })).toBe('/var/lib/receiver/.cache/receiver');
    expect(refusal(() => addonDir({})).kind).toBe('config');
  });

  it('creates the directory 0700 and loads the addon it wrote (0500): a working better-sqlite3 binding', () => {
    const dir = join(fresh(), 'cache', 'receiver');
    const addon = loadAddon({ dir, sha256, bytes: () => bytes }) as { Database?: unknown };
    expect(typeof addon.Database).toBe('function');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readdirSync(dir)).toEqual([`better_sqlite3-${sha256.slice(0, 16)}.node`]);
    expect(statSync(addonFile({ dir, sha256 })).mode & 0o777).toBe(0o500);
  });

  it('reads the executable only when the file is missing or differs, and then replaces it', () => {
    const dir = fresh();
    let reads = 0;
    const source = { dir, sha256, bytes: () => (reads++, bytes) };
    loadAddon(source);
    loadAddon(source);
    expect(reads).toBe(1);
    const file = addonFile({ dir, sha256 });
    chmodSync(file, 0o700);
    writeFileSync(file, bytes.subarray(0, 1000));
    chmodSync(file, 0o500);
    loadAddon(source);
    expect(reads).toBe(2);
    expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(sha256);
  });

  it('refuses a directory that group or others can write, and a parent others can write without the sticky bit', () => {
    const open = fresh();
    mkdirSync(open, { mode: 0o700 });
    chmodSync(open, 0o770);
    const e = refusal(() => ensurePrivateDir(open));
    expect(e.kind).toBe('config');
    expect(e.message).toContain(open);
    expect(e.hint).toContain('RECEIVER_NATIVE_DIR');

    const parent = fresh();
    mkdirSync(parent);
    chmodSync(parent, 0o777);
    expect(refusal(() => ensurePrivateDir(join(parent, 'receiver'))).message).toContain(`${parent} (above`);
    // The sticky bit (as on /tmp) keeps others to their own entries: accepted.
    chmodSync(parent, 0o1777);
    expect(ensurePrivateDir(join(parent, 'receiver'))).toBe(join(parent, 'receiver'));
  });

  it('refuses an addon file that group or others can write, whatever its bytes', () => {
    const dir = fresh();
    loadAddon({ dir, sha256, bytes: () => bytes });
    chmodSync(addonFile({ dir, sha256 }), 0o520);
    expect(refusal(() => loadAddon({ dir, sha256, bytes: () => bytes })).message).toContain('writable by it alone');
  });

  it('refuses a symbolic link planted under the addon file name, even to the right bytes: Error/Try naming it, the link left alone', () => {
    const dir = fresh();
    ensurePrivateDir(dir);
    const elsewhere = join(tmp.dir, `genuine-${k}.node`);
    writeFileSync(elsewhere, bytes, { mode: 0o500 });
    const file = addonFile({ dir, sha256 });
    symlinkSync(elsewhere, file);
    const e = refusal(() => loadAddon({ dir, sha256, bytes: () => bytes }));
    expect(e.kind).toBe('config');
    expect(e.message).toBe(`${file} is a symbolic link; not loading it`);
    expect(e.hint).toContain('RECEIVER_NATIVE_DIR');
    expect(lstatSync(file).isSymbolicLink()).toBe(true);
  });
});
