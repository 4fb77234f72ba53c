import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { effectEnvironment, runExec } from '../../src/effects/exec.js';
import { makeConfig, tempDir } from '../helpers.js';

const event = { id: 7, source: 'shop', deliveryId: 'd-1', eventType: 'order.paid', headers: {}, body: Buffer.from('{"raw":  "bytes"}\n'), receivedAt: 0 };
const base = {
  event,
  businessKey: 'ord_1',
  effectKey: 'licence:ord_1',
  runKey: 'licence:ord_1#forced-2',
  attempt: 3,
  baseEnv: { PATH: process.env.PATH },
  timeoutMs: 5000,
};

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('exec effect', () => {
  const tmp = tempDir('receiver-exec-');
  afterAll(tmp.cleanup);

  it('gets the raw body on stdin and the documented environment, argv without a shell', async () => {
    const out = join(tmp.dir, 'env.txt');
    const script = 'cat > "$1.body"; env | grep ^RECEIVER_ | sort > "$1"; printf "%s" "$2" > "$1.arg"';
    const r = await runExec({ ...base, argv: ['/bin/sh', '-c', script, 'sh', out, '$(touch pwned) ; `x`'] });
    expect(r).toEqual({ ok: true });
    expect(readFileSync(`${out}.body`, 'utf8')).toBe('{"raw":  "bytes"}\n');
    expect(readFileSync(`${out}.arg`, 'utf8')).toBe('$(touch pwned) ; `x`');
    expect(existsSync(join(process.cwd(), 'pwned'))).toBe(false);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual([
      'RECEIVER_ATTEMPT=3',
      'RECEIVER_DELIVERY_ID=d-1',
      'RECEIVER_EFFECT_KEY=licence:ord_1',
      'RECEIVER_EVENT_ID=7',
      'RECEIVER_EVENT_TYPE=order.paid',
      'RECEIVER_KEY=ord_1',
      'RECEIVER_RUN_KEY=licence:ord_1#forced-2',
      'RECEIVER_SOURCE=shop',
    ]);
  });

  it('a non-zero exit is a retryable failure with the tail of stdout and stderr', async () => {
    const r = await runExec({ ...base, argv: ['/bin/sh', '-c', 'head -c 10000 /dev/zero | tr "\\0" a; echo; echo out-end; echo err-end >&2; exit 3'] });
    expect(r).toMatchObject({ ok: false, retryable: true, error: '/bin/sh exited with code 3' });
    const output = (r as { output: string }).output;
    expect(output.length).toBeLessThanOrEqual(4096);
    expect(output.length).toBeGreaterThan(4000);
    expect(output).toContain('out-end');
    expect(output).toContain('err-end');
  });

  it('a command that cannot start is a retryable failure naming it', async () => {
    const r = await runExec({ ...base, argv: [join(tmp.dir, 'no-such-tool')] });
    expect(r).toMatchObject({ ok: false, retryable: true, error: `cannot run ${join(tmp.dir, 'no-such-tool')}: ENOENT` });
  });

  it('a command that ignores its stdin still succeeds', async () => {
    const big = { ...event, body: Buffer.alloc(4 * 1024 * 1024, 'x') };
    expect(await runExec({ ...base, event: big, argv: ['true'] })).toEqual({ ok: true });
  });

  it('at timeoutSeconds the whole process group is killed, grandchildren included', async () => {
    const pids = join(tmp.dir, 'pids');
    const t0 = Date.now();
    const r = await runExec({ ...base, timeoutMs: 400, argv: ['/bin/sh', '-c', 'sleep 30 & echo $! > "$1"; echo $$ >> "$1"; echo started; wait', 'sh', pids] });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(r).toMatchObject({ ok: false, retryable: true, error: 'timed out after 0.4s; process group killed', output: 'started\n', timedOut: true });
    const [grandchild, shell] = readFileSync(pids, 'utf8').trim().split('\n').map(Number);
    // SIGKILL is delivered at once; give the kernel a moment to reap the orphan.
    for (let i = 0; i < 100 && (alive(grandchild!) || alive(shell!)); i++) await new Promise((r) => setTimeout(r, 20));
    expect(alive(shell!)).toBe(false);
    expect(alive(grandchild!)).toBe(false);
  });

  it('a process left in the background does not hold the effect open after the command exits', async () => {
    const t0 = Date.now();
    const r = await runExec({ ...base, argv: ['/bin/sh', '-c', '(sleep 3; echo late) & echo done'] });
    expect(r).toEqual({ ok: true, output: 'done\n' });
    expect(Date.now() - t0).toBeLessThan(2500);
  });

  it('exec effects draw only on PATH, HOME, LANG, LC_*, TZ and the names routes list in effect.env; never a RECEIVER_* setting', () => {
    const env = {
      PATH: '/usr/bin',
      HOME: '/home/r',
      LANG: 'C.UTF-8',
      LC_TIME: 'en_GB.UTF-8',
      TZ: 'Europe/Lisbon',
      SHELL: '/bin/bash',
      DEPLOY_TOKEN: 'tool-credential',
      LICENCE_API_KEY: 'unrelated-credential',
      STRIPE_WEBHOOK_SECRET: 'whsec_signing',
      RECEIVER_DB: 'postgres://u:pw@h/db',
      RECEIVER_ADMIN_TOKEN: 'admin-token',
    };
    const config = makeConfig(
      {
        sources: { stripe: { provider: 'stripe', secret: 'env:STRIPE_WEBHOOK_SECRET' } },
        routes: [{ name: 'deploy', source: 'stripe', key: '{id}', effect: { exec: ['true'], env: ['DEPLOY_TOKEN'] } }],
      },
      tmp.dir,
      env,
    );
    expect(effectEnvironment(config, env)).toEqual({
      PATH: '/usr/bin',
      HOME: '/home/r',
      LANG: 'C.UTF-8',
      LC_TIME: 'en_GB.UTF-8',
      TZ: 'Europe/Lisbon',
      DEPLOY_TOKEN: 'tool-credential',
    });
  });

  it("a command gets the minimal variables and its own route's effect.env, not another route's, and RECEIVER_* only as receiver sets them", async () => {
    const out = join(tmp.dir, 'own-env.txt');
    const baseEnv = {
      PATH: process.env.PATH,
      HOME: '/home/r',
      DEPLOY_TOKEN: 'deploy-credential',
      OTHER_TOKEN: 'other-route-credential',
      RECEIVER_EVENT_ID: '999',
    };
    const r = await runExec({ ...base, baseEnv, passEnv: ['DEPLOY_TOKEN'], argv: ['/bin/sh', '-c', 'env > "$1"', 'sh', out] });
    expect(r).toEqual({ ok: true });
    const got = readFileSync(out, 'utf8');
    expect(got).toContain('DEPLOY_TOKEN=deploy-credential\n');
    expect(got).toContain('HOME=/home/r\n');
    expect(got).not.toContain('other-route-credential');
    expect(got).toContain('RECEIVER_EVENT_ID=7\n');
    expect(got).not.toContain('RECEIVER_EVENT_ID=999');
  });
});
