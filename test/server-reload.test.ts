import { afterAll, describe, expect, it } from 'vitest';
import { startReceiver } from '../src/server.js';
import { createLogger } from '../src/log.js';
import { makeConfig, tempDir } from './helpers.js';

/** Receiver.reload from code: what a reload keeps (the admin login's failed tries) and what it refuses. */
describe('startReceiver: reload', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  const quiet = createLogger('silent');

  it('keeps the failed admin logins across a reload, and refuses a port or pidFile change with nothing applied', async () => {
    const json = { port: 0, database: `${tmp.dir}/r.db`, admin: { token: 'admin-token-for-the-reload-test-0123456789' } };
    const receiver = await startReceiver(makeConfig(json, tmp.dir), { logger: quiet, deliveryLogger: quiet });
    try {
      const tryToken = () => fetch(`${receiver.address.url}/admin/api/stats`, { headers: { authorization: 'Bearer wrong' } }).then((r) => r.status);
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push(await tryToken());
      expect(statuses).toEqual([401, 401, 401, 429]);
      const changes = await receiver.reload(makeConfig({ ...json, maxBodyBytes: 4096 }, tmp.dir));
      expect(changes.settings).toEqual(['maxBodyBytes']);
      // A reload gives a guesser no fresh start.
      expect(await tryToken()).toBe(429);
      await expect(receiver.reload(makeConfig({ ...json, port: 1 }, tmp.dir))).rejects.toThrow(/port: needs a restart/);
      await expect(receiver.reload(makeConfig({ ...json, pidFile: `${tmp.dir}/r.pid` }, tmp.dir))).rejects.toThrow(/pidFile: needs a restart/);
      expect(receiver.current().config.maxBodyBytes).toBe(4096);
    } finally {
      await receiver.stop();
    }
  });
});
