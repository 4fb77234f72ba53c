import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { perTurn } from '../src/log.js';
import { REPO } from './helpers.js';

describe('per-turn log destination (the per-delivery lines of serve)', () => {
  it('writes the lines of one event-loop turn with one write, at the end of the turn', async () => {
    const writes: string[] = [];
    const logger = pino({ base: null, timestamp: false }, perTurn({ write: (text: string) => writes.push(text) }));
    logger.info({ n: 1 }, 'delivery');
    logger.info({ n: 2 }, 'delivery');
    logger.warn({ n: 3 }, 'delivery');
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(1);
    expect(
      writes[0]
        ?.trimEnd()
        .split('\n')
        .map((l) => (JSON.parse(l) as { n: number }).n),
    ).toEqual([1, 2, 3]);
    logger.info({ n: 4 }, 'delivery');
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(2);
    // logger.flush() writes what is pending at once.
    logger.info({ n: 5 }, 'delivery');
    logger.flush();
    expect(writes).toHaveLength(3);
  });

  it('a line logged just before process.exit() is written', () => {
    const script = `
      import { createLogger } from ${JSON.stringify(join(REPO, 'dist/log.js'))};
      const logger = createLogger('info', 2, { redact: false, perTurn: true });
      logger.info({ eventId: 7 }, 'delivery');
      logger.error({ eventId: 8 }, 'delivery');
      process.exit(3);
    `;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(child.status).toBe(3);
    const lines = child.stderr
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { eventId: number; level: string });
    expect(lines.map((l) => [l.eventId, l.level])).toEqual([
      [7, 'info'],
      [8, 'error'],
    ]);
  });
});
