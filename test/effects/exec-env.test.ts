import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, tempDir, waitFor, writeConfig } from '../helpers.js';

/**
 * What an exec effect run by `serve`'s drain sees of the service's environment: a real
 * child process of a real `receiver serve` child process, writing `env` to a file.
 */
describe('exec effect environment (serve, child process)', () => {
  const tmp = tempDir('receiver-exec-env-');
  afterAll(tmp.cleanup);

  it('gets PATH, HOME, LANG, LC_*, TZ and its effect.env; never an unlisted variable, a referenced secret or a RECEIVER_* setting', async () => {
    const out = join(tmp.dir, 'env.txt');
    const script = join(tmp.dir, 'deploy.sh');
    writeFileSync(script, `#!/bin/sh\nenv > "${out}.tmp" && mv "${out}.tmp" "${out}"\n`);
    chmodSync(script, 0o755);
    const file = writeConfig(tmp.dir, {
      sources: {
        shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' },
        gh: { provider: 'github', secret: 'env:GH_WEBHOOK_SECRET' },
      },
      admin: { token: 'env:RECEIVER_ADMIN_TOKEN' },
      metrics: { token: 'env:METRICS_BEARER' },
      routes: [{ name: 'deploy', source: 'shop', key: '{body.id}', effect: { exec: [script], env: ['DEPLOY_KEY'] } }],
    });
    const env = {
      PATH: process.env.PATH,
      HOME: '/home/receiver-test',
      LANG: 'C.UTF-8',
      LC_TIME: 'C',
      TZ: 'UTC',
      DEPLOY_KEY: 'listed-deploy-key',
      LICENCE_API_KEY: 'unlisted-licence-key',
      GH_WEBHOOK_SECRET: 'referenced-webhook-secret',
      METRICS_BEARER: 'referenced-metrics-token',
      RECEIVER_ADMIN_TOKEN: 'admin-token-0123456789abcdef0123456789',
      RECEIVER_METRICS_TOKEN: 'receiver-setting-metrics',
      RECEIVER_LOG_LEVEL: 'warn',
      RECEIVER_DEBUG: '1',
    };
    const serve = await startServe(file, { env, args: ['--log-level', 'info'] });
    try {
      const res = await fetch(`${serve.url}/webhooks/shop`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'evt_1', type: 'deploy' }),
      });
      expect(res.status).toBe(202);
      await waitFor(() => (existsSync(out) ? true : undefined), 'the exec effect', 15_000);
    } finally {
      expect(await serve.stop()).toBe(0);
    }
    const got = Object.fromEntries(
      readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    expect(got).toMatchObject({
      PATH: process.env.PATH,
      HOME: '/home/receiver-test',
      LANG: 'C.UTF-8',
      LC_TIME: 'C',
      TZ: 'UTC',
      DEPLOY_KEY: 'listed-deploy-key',
    });
    for (const name of [
      'LICENCE_API_KEY',
      'GH_WEBHOOK_SECRET',
      'METRICS_BEARER',
      'RECEIVER_ADMIN_TOKEN',
      'RECEIVER_METRICS_TOKEN',
      'RECEIVER_LOG_LEVEL',
      'RECEIVER_DEBUG',
    ])
      expect(got).not.toHaveProperty(name);
    // Receiver's own event variables, and only those, are RECEIVER_*.
    expect(
      Object.keys(got)
        .filter((k) => k.startsWith('RECEIVER_'))
        .sort(),
    ).toEqual([
      'RECEIVER_ATTEMPT',
      'RECEIVER_DELIVERY_ID',
      'RECEIVER_EFFECT_KEY',
      'RECEIVER_EVENT_ID',
      'RECEIVER_EVENT_TYPE',
      'RECEIVER_KEY',
      'RECEIVER_RUN_KEY',
      'RECEIVER_SOURCE',
    ]);
    // The test runner's own variables (whatever they are) did not come along either.
    const allowed = new Set(['PATH', 'HOME', 'LANG', 'TZ', 'DEPLOY_KEY', 'PWD', 'SHLVL', '_']);
    expect(Object.keys(got).filter((k) => !allowed.has(k) && !k.startsWith('LC_') && !k.startsWith('RECEIVER_'))).toEqual([]);
  });
});
