import { lstatSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processIsServe, readPidFile, readReloadRecord, writePidFile, writeReloadRecord } from '../../src/cli/pid-file.js';
import { tempDir } from '../helpers.js';

/** serve's pid file and reload record, as files: replaced whole, never written through a link. */
describe('pid file and reload record', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('writes through no link left at its temporary name; the victim stays as it was', () => {
    const pidFile = join(tmp.dir, 'receiver.pid');
    const victim = join(tmp.dir, 'victim');
    writeFileSync(victim, 'keep me\n');
    symlinkSync(victim, `${pidFile}.${process.pid}.tmp`);
    symlinkSync(victim, `${pidFile}.reload.json.${process.pid}.tmp`);
    writePidFile(pidFile, 4242);
    writeReloadRecord(pidFile, { pid: 4242, seq: 1, startedAt: 1, finishedAt: 2, file: '/x.json', result: 'applied', changes: {} });
    expect(readFileSync(victim, 'utf8')).toBe('keep me\n');
    expect(lstatSync(pidFile).isFile()).toBe(true);
    expect(readPidFile(pidFile)).toBe(4242);
    expect(readReloadRecord(pidFile)).toMatchObject({ pid: 4242, seq: 1, result: 'applied' });
  });

  it('a pid file without a pid is an error; none at all is undefined', () => {
    const pidFile = join(tmp.dir, 'garbage.pid');
    expect(readPidFile(pidFile)).toBeUndefined();
    writeFileSync(pidFile, 'serve\n');
    expect(() => readPidFile(pidFile)).toThrow(`${pidFile} does not hold a process id`);
  });

  it('knows a process that is not serve, and one that does not exist', () => {
    expect(processIsServe(process.pid)).toMatchObject({ running: true, serve: false });
    expect(processIsServe(2 ** 22 + 1)).toEqual({ running: false, serve: false });
  });
});
