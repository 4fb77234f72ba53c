import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BINARY, binarySandbox, REPO, tempDir, waitFor } from '../helpers.js';
import { runCronFile } from './cron.js';
import { commandBlock, debianRoot, envFileCommand, mover, runCommands, standIns } from './docs.js';

/**
 * "Install as one file" of docs/operations.md on a host with no clone and no node: its
 * commands in a scratch root, from a directory holding only the executable; then what an
 * operator does next, through what the executable installed: check-config through the
 * wrapper, serve as the unit runs it, send-test, events and replay through the wrapper (and
 * the ticket flow: an order found by e-mail, one route replayed),
 * and the cron lines (their exit status and what reaches logger).
 */

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** A unit file's [Service] settings: Environment= lines as variables, the rest by name (the last wins). */
function unitSettings(text: string): { env: Record<string, string>; get: (key: string) => string } {
  const env: Record<string, string> = {};
  const settings = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^(\w+)=(.*)$/.exec(line);
    if (m === null) continue;
    if (m[1] === 'Environment') {
      const [name, ...value] = m[2]!.split('=');
      env[name!] = value.join('=');
    } else settings.set(m[1]!, m[2]!);
  }
  return { env, get: (key) => settings.get(key) ?? '' };
}

describe.runIf(BINARY !== undefined)('the one-file install of docs/operations.md, on a host with no clone and no node', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('installs from the executable alone; the wrapper, the unit and the cron lines it wrote run every operator command', async () => {
    chmodSync(tmp.dir, 0o755);
    const root = join(tmp.dir, 'root');
    debianRoot(root);
    const moved = mover(root);
    // What the operator copied to the server: the executable, nothing else.
    const download = join(tmp.dir, 'download');
    mkdirSync(download);
    symlinkSync(BINARY!, join(download, 'receiver-linux-x64'));
    const box = binarySandbox();
    const env = { PATH: box.env.PATH!, HOME: join(tmp.dir, 'home') };
    runCommands(commandBlock('one-file-install-commands', 'Install as one file'), moved, {
      cwd: download,
      env,
      // Under the scratch root instead of /.
      edit: (c) => (/ contrib install$/.test(c) ? `${c} --dir ${root}` : c),
    });
    runCommands([envFileCommand()], moved, { cwd: download, env });
    const configFile = join(root, 'etc/receiver/receiver.config.json');
    standIns(configFile, moved);

    // What the executable installed names the executable, where the docs put it; never the clone.
    const executable = join(root, 'usr/local/lib/receiver/receiver');
    expect(statSync(executable).mode & 0o777).toBe(0o755);
    const unit = readFileSync(join(root, 'etc/systemd/system/receiver.service'), 'utf8');
    const wrapper = readFileSync(join(root, 'usr/local/bin/receiver'), 'utf8');
    expect(unit).toContain(`\nExecStart=${executable} serve\n`);
    expect(wrapper).toContain(`\nexec ${executable} "$@"\n`);
    expect(statSync(join(root, 'usr/local/bin/receiver')).mode & 0o777).toBe(0o755);
    for (const f of [unit, wrapper, readFileSync(join(root, 'etc/cron.d/receiver'), 'utf8')]) expect(f).not.toContain(REPO);
    expect(statSync(configFile).mode & 0o777).toBe(0o640);

    // The operator's `receiver`: the wrapper, as the service user (here: this user), its
    // paths moved; HOME as the service user's, where the SQLite addon goes.
    const wrapperEnv = {
      ...env,
      HOME: join(root, 'var/lib/receiver'),
      RECEIVER_USER: userInfo().username,
      RECEIVER_ENV_FILE: join(root, 'etc/receiver/env'),
      RECEIVER_HOME: join(root, 'var/lib/receiver'),
      RECEIVER_CONFIG: configFile,
    };
    const port = await freePort();
    const receiver = (args: string[]) =>
      spawnSync(join(root, 'usr/local/bin/receiver'), args, { env: { ...wrapperEnv, RECEIVER_PORT: String(port) }, encoding: 'utf8', cwd: download });

    const check = receiver(['check-config']);
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
    expect(check.stdout).toContain(`database: ${root}/var/lib/receiver/receiver.db`);

    // serve, as the unit runs it: its ExecStart, working directory and Environment= (serve reads the environment file itself).
    const service = unitSettings(moved(unit));
    const [program, ...args] = service.get('ExecStart').split(' ');
    expect(program).toBe(executable);
    // The unit's switch to the service's user needs a `receiver` account, which this host lacks.
    expect(service.env.RECEIVER_USER).toBe('receiver');
    const { RECEIVER_USER: _user, ...unitEnv } = service.env;
    const serve = spawn(program!, args, {
      cwd: service.get('WorkingDirectory'),
      env: { ...env, HOME: join(root, 'var/lib/receiver'), ...unitEnv, RECEIVER_PORT: String(port) },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let log = '';
    serve.stderr.on('data', (d: Buffer) => (log += d.toString()));
    const exited = new Promise<number | null>((r) => serve.on('exit', r));
    try {
      await waitFor(() => (log.includes('"msg":"listening"') ? true : undefined), 'serve listening', 20_000);
      // The documented commands leave no secret file that every user can read.
      expect(log).not.toContain('by every user on this machine');

      const sent = receiver(['send-test', 'stripe']);
      expect(sent.stdout).toMatch(/-> 202 /);
      const listed = receiver(['events', 'list', '--source', 'stripe', '--json']);
      expect(listed.status).toBe(0);
      const events = JSON.parse(listed.stdout) as { id: number }[];
      expect(events).toHaveLength(1);
      const replayed = receiver(['replay', String(events[0]!.id)]);
      expect(replayed.stderr).toBe('');
      expect(replayed.status).toBe(0);

      // The ticket flow (docs/operations.md, "Replay from a ticket"): an order found by the
      // customer's e-mail in its body, its licence route sent again on its own, and done.
      const order = { id: 'evt_ticket', type: 'checkout.session.completed', data: { object: { id: 'cs_ticket', customer_details: { email: 'ann@shop.example' } } } };
      const orderFile = join(tmp.dir, 'order.json');
      writeFileSync(orderFile, JSON.stringify(order));
      const sentOrder = receiver(['send-test', 'stripe', '--run-effects', '--body', orderFile]);
      expect(sentOrder.stdout + sentOrder.stderr).toMatch(/-> 202 /);
      const found = receiver(['events', 'list', '--source', 'stripe', '--search', 'ann@shop.example', '--json']);
      expect(found.stderr).toBe('');
      const ids = (JSON.parse(found.stdout) as { id: number }[]).map((e) => String(e.id));
      expect(ids).toHaveLength(1);
      const licence = () =>
        (JSON.parse(receiver(['events', 'show', ids[0]!, '--json']).stdout) as { units: { route: string; status: string; replays: number }[] }).units.find(
          (u) => u.route === 'issue-licence',
        );
      await waitFor(() => (licence()?.status === 'done' ? true : undefined), 'the licence route done', 20_000);
      const again = receiver(['replay', ids[0]!, '--route', 'issue-licence', '--force']);
      expect(again.stderr).toBe('');
      expect(again.status).toBe(0);
      await waitFor(
        () => {
          const u = licence();
          return u?.status === 'done' && u.replays === 1 ? true : undefined;
        },
        'the licence route sent again',
        20_000,
      );

      // `receiver reload`: serve found by the example's pid file, its outcome printed.
      const reloaded = receiver(['reload']);
      expect(reloaded.stderr).toBe('');
      expect(reloaded.stdout).toBe(`serve ${serve.pid} reloaded ${configFile}: nothing changed\n`);

      // The cron lines, as installed: through the wrapper, output to logger, the status kept.
      const cron = runCronFile(readFileSync(join(root, 'etc/cron.d/receiver'), 'utf8'), moved, {
        tmp: join(tmp.dir, 'cron'),
        path: [join(root, 'usr/local/bin'), env.PATH],
        env: wrapperEnv,
      });
      const backup = cron.run('receiver-backup');
      expect(backup.status, backup.logged).toBe(0);
      expect(backup.logged).toMatch(/^receiver-backup: wrote .*\/var\/backups\/receiver\/receiver-\d{4}-\d{2}-\d{2}\.db \(/m);
      expect(readdirSync(join(root, 'var/backups/receiver'))).toHaveLength(1);
      const purge = cron.run('receiver-purge');
      expect(purge.status, purge.logged).toBe(0);
      rmSync(join(root, 'var/backups/receiver'), { recursive: true });
      const failed = cron.run('receiver-backup');
      expect(failed.status).not.toBe(0);
      expect(failed.logged).toMatch(/^receiver-backup: Error: the directory .*\/var\/backups\/receiver does not exist$/m);
    } finally {
      serve.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    // The addon went where the docs say, for the service user.
    expect(readdirSync(join(root, 'var/lib/receiver/.cache/receiver'))).toHaveLength(1);
  });
});
