import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';

/**
 * `receiver reload` against a real `receiver serve`: it checks the file first (a broken one
 * is reported and serve is never signalled), signals only a running serve, and prints the
 * outcome serve itself recorded beside its pid file.
 */

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** How many reloads serve has logged (applied or not). */
const reloadLines = (serve: ServeProcess) =>
  serve
    .output()
    .stderr.split('\n')
    .filter((l) => l.includes('"msg":"config reload')).length;

const alive = (pid: number) => existsSync(`/proc/${pid}`);

describe('receiver reload', () => {
  const tmp = tempDir();
  const dir = join(tmp.dir, 'serve');
  mkdirSync(dir);
  const pidFile = join(dir, 'receiver.pid');
  const route = (name: string) => ({ name, source: 'gh', key: '{id}', effect: { exec: ['true'] } });
  let base: Record<string, unknown>;
  let file: string;
  let serve: ServeProcess;

  beforeAll(async () => {
    base = { port: await freePort(), pidFile, sources: { gh: { provider: 'github', secret: 'reload-command-secret-0000' } } };
    file = writeConfig(dir, { ...base, routes: [route('a')] });
    serve = await startServe(file, { portFlag: false });
  });
  afterAll(async () => {
    await serve.stop();
    tmp.cleanup();
  });

  it('serve writes its pid to pidFile once it listens', () => {
    expect(readFileSync(pidFile, 'utf8')).toBe(`${serve.child.pid}\n`);
  });

  it('applies a reload and names what changed, as serve logged it', async () => {
    writeConfig(dir, { ...base, routes: [route('a'), route('b')] });
    const r = await runCli(['reload', '-c', file]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`serve ${serve.child.pid} reloaded ${file}\n  routes added: b\n`);
    expect(r.code).toBe(0);
    expect(serve.output().stderr).toMatch(/"routesAdded":\["b"\][^\n]*"msg":"config reloaded"/);

    const again = await runCli(['reload', '-c', file, '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ pid: serve.child.pid, result: 'applied', file, changes: {} });
  }, 30_000);

  it('a broken file: reported as check-config reports it (exit 2), serve not signalled and still on its configuration', async () => {
    const before = reloadLines(serve);
    const record = readFileSync(`${pidFile}.reload.json`, 'utf8');
    writeFileSync(file, '{\n  "sources": {,\n}\n');
    const r = await runCli(['reload', '-c', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^Error: ${file}:2:\\d+: not valid JSON`));
    // A reload serve made would log within milliseconds.
    await new Promise((res) => setTimeout(res, 500));
    expect(reloadLines(serve)).toBe(before);
    expect(readFileSync(`${pidFile}.reload.json`, 'utf8')).toBe(record);
    expect((await fetch(`${serve.url}/healthz`)).status).toBe(200);

    // What check-config finds beyond the file's shape: a program that is not there.
    writeConfig(dir, { ...base, routes: [route('a'), { ...route('c'), effect: { exec: [join(dir, 'no-such-program')] } }] });
    const missing = await runCli(['reload', '-c', file]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`routes.1 (c).effect.exec.0: ${join(dir, 'no-such-program')} does not exist\n`);
    await new Promise((res) => setTimeout(res, 500));
    expect(reloadLines(serve)).toBe(before);
  }, 30_000);

  it('a port change: refused by serve, the field named (exit 1), nothing applied', async () => {
    writeConfig(dir, { ...base, port: (base.port as number) + 1, routes: [route('a')] });
    const r = await runCli(['reload', '-c', file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `Error: serve ${serve.child.pid} refused the reload: ${file}: port: needs a restart; nothing of this reload was applied\n` +
        'Try: restart the service to apply port (systemctl restart receiver), or change it back and reload\n',
    );
    const json = await runCli(['reload', '-c', file, '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({ result: 'refused', restart: ['port'], error: expect.stringContaining('port: needs a restart') });
    // Route b (added above) is still there: removing it now is the change.
    writeConfig(dir, { ...base, routes: [route('a')] });
    const back = await runCli(['reload', '-c', file]);
    expect(back.stdout).toContain('  routes removed: b\n');
  }, 30_000);

  it("another configuration file than serve's: the outcome, with a warning naming both", async () => {
    const other = join(tmp.dir, 'other.json');
    writeFileSync(other, readFileSync(file));
    const r = await runCli(['reload', '-c', other]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`serve ${serve.child.pid} reloaded ${file}: nothing changed\n`);
    expect(r.stderr).toBe(`Warning: serve ${serve.child.pid} reads ${file}; this command checked ${other} (pass -c ${file})\n`);
  }, 30_000);

  it('serve writes no outcome where the command looks: exit 1 after --timeout, saying where it looked', async () => {
    const elsewhere = join(tmp.dir, 'elsewhere.pid');
    const started = Date.now();
    const r = await runCli(['reload', '-c', file, '--pid', String(serve.child.pid), '--pid-file', elsewhere, '--timeout', '1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`Error: serve ${serve.child.pid} was signalled but wrote no outcome to ${elsewhere}.reload.json within 1 s\nTry: `);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 30_000);

  it('a pid that is not a receiver serve is refused and never signalled', async () => {
    // sleep ends on SIGHUP: alive afterwards means it was never sent one.
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const r = await runCli(['reload', '-c', file, '--pid', String(other.pid)]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`Error: process ${other.pid} (--pid) is not a receiver serve: sleep 30; it was not signalled\n`);
      expect(r.stderr).toContain('Try: ');
      await new Promise((res) => setTimeout(res, 200));
      expect(alive(other.pid!)).toBe(true);
      expect(other.exitCode).toBe(null);
    } finally {
      other.kill('SIGKILL');
    }
  }, 30_000);

  it("without a pid file: the systemd unit's MainPID is signalled, and the unknown outcome said (exit 1)", async () => {
    // systemctl as this machine has none: it answers `show --property MainPID --value <unit>` with serve's pid.
    const bin = join(tmp.dir, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'systemctl'), `#!/bin/sh\n[ "$*" = "show --property MainPID --value receiver-test" ] && echo ${serve.child.pid}\n`);
    chmodSync(join(bin, 'systemctl'), 0o755);
    const { pidFile: _p, ...noPid } = base;
    const other = join(tmp.dir, 'no-pid.json');
    writeFileSync(other, JSON.stringify({ database: join(dir, 'receiver.db'), ...noPid, routes: [route('a')] }));
    const before = reloadLines(serve);
    const r = await runCli(['reload', '-c', other, '--unit', 'receiver-test'], { env: { PATH: `${bin}:${process.env.PATH}` } });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`Error: sent SIGHUP to serve ${serve.child.pid} (the unit receiver-test's MainPID), but its outcome is unknown`);
    await waitFor(() => (reloadLines(serve) > before ? true : undefined), 'serve to reload');
  }, 30_000);

  it("a second serve given the pid file of a running one refuses to start (exit 1, naming it); the file stays the running one's", async () => {
    const d = join(tmp.dir, 'second');
    mkdirSync(d);
    const f = writeConfig(d, { pidFile, sources: base.sources });
    const r = await runCli(['serve', '-c', f, '--port', '0']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      `Error: another receiver serve (pid ${serve.child.pid}) runs with the pid file ${pidFile}\nTry: stop it first (kill ${serve.child.pid}), or give this serve a pidFile of its own`,
    );
    expect(r.stderr).not.toContain('"msg":"listening"');
    expect(readFileSync(pidFile, 'utf8')).toBe(`${serve.child.pid}\n`);
  }, 30_000);

  it('a pid file serve cannot write ends its start: exit 1, Error/Try naming it', async () => {
    const d = join(tmp.dir, 'unwritable');
    mkdirSync(d);
    const f = writeConfig(d, { sources: base.sources });
    const r = await runCli(['serve', '-c', f, '--port', '0', '--pid-file', join(d, 'no-such-dir/receiver.pid')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`Error: cannot write the pid file ${join(d, 'no-such-dir/receiver.pid')} (ENOENT)\nTry: make its directory writable`);
  }, 30_000);

  it('a clean exit removes the pid file; one a crash left behind is reported as stale, nothing signalled', async () => {
    const d = join(tmp.dir, 'stale');
    mkdirSync(d);
    const pf = join(d, 'receiver.pid');
    const f = writeConfig(d, { pidFile: pf, sources: base.sources });
    const clean = await startServe(f);
    expect(readFileSync(pf, 'utf8')).toBe(`${clean.child.pid}\n`);
    expect(await clean.stop()).toBe(0);
    expect(existsSync(pf)).toBe(false);

    // A pid file another process wrote since is left alone.
    const replaced = await startServe(f);
    writeFileSync(pf, '999999\n');
    expect(await replaced.stop()).toBe(0);
    expect(readFileSync(pf, 'utf8')).toBe('999999\n');

    const crashed = await startServe(f);
    await crashed.stop('SIGKILL');
    expect(readFileSync(pf, 'utf8')).toBe(`${crashed.child.pid}\n`);
    const r = await runCli(['reload', '-c', f]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `Error: serve is not running: the pid file ${pf} names process ${crashed.child.pid}, which does not exist\n` +
        `Try: start serve; a serve that stopped without a clean exit leaves ${pf} behind (remove it)\n`,
    );
    // The next serve takes over the file a crash left behind.
    const next = await startServe(f);
    expect(readFileSync(pf, 'utf8')).toBe(`${next.child.pid}\n`);
    expect(await next.stop()).toBe(0);
  }, 30_000);
});
