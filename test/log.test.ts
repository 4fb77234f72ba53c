import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DrainLinesAfterDeliveries } from '../src/http/delivery-log.js';
import { batchedLines, createLogger, logStyle, prettyLine } from '../src/log.js';
import { REPO, tempDir } from './helpers.js';

describe('log lines', () => {
  it('a line logged just before process.exit() is written (the exit flushes the stderr writer)', () => {
    const script = `
      import { createLogger } from ${JSON.stringify(join(REPO, 'dist/log.js'))};
      const logger = createLogger('info', { redact: false });
      for (let i = 0; i < 500; i++) logger.info({ eventId: i }, 'delivery');
      logger.error({ eventId: 500 }, 'delivery');
      process.exit(3);
    `;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(child.status).toBe(3);
    const lines = child.stderr
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { eventId: number; level: string });
    expect(lines).toHaveLength(501);
    expect(lines.map((l) => l.eventId)).toEqual([...Array(501).keys()]);
    expect(lines[500]?.level).toBe('error');
  });

  it('a process whose stderr nobody reads still ends: it gives the reader a second at exit, then leaves the rest', async () => {
    const tmp = tempDir();
    const doneFile = join(tmp.dir, 'done-at');
    const script = `
      import { writeFileSync } from 'node:fs';
      import { createLogger } from ${JSON.stringify(join(REPO, 'dist/log.js'))};
      const logger = createLogger('info', { redact: false });
      for (let i = 0; i < 3000; i++) logger.info({ eventId: i, padding: 'x'.repeat(100) }, 'delivery');
      // When its work is done: from here to its exit is the time given to the reader.
      writeFileSync(${JSON.stringify(doneFile)}, String(Date.now()));
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'pipe'] });
    // Not read until the child has exited: its pipe fills after a few hundred lines.
    let text = '';
    child.stderr.on('data', (d: Buffer) => (text += d.toString()));
    child.stderr.pause();
    const code = await new Promise((r) => child.on('exit', r));
    const exitedAt = Date.now();
    expect(code).toBe(0);
    // A second for the reader, then it leaves (a little more for the exit itself on a busy machine).
    const gaveMs = exitedAt - Number(readFileSync(doneFile, 'utf8'));
    tmp.cleanup();
    expect(gaveMs).toBeGreaterThanOrEqual(950);
    expect(gaveMs).toBeLessThan(2500);
    child.stderr.resume();
    await new Promise((r) => child.stderr.on('end', r));
    // In order from the first, not all of them; the last one may be cut where the reader stopped taking bytes.
    const ids = text
      .split('\n')
      .slice(0, -1)
      .map((l) => (JSON.parse(l) as { eventId: number }).eventId);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.length).toBeLessThan(3000);
    expect(ids).toEqual([...Array(ids.length).keys()]);
  });

  it('censors a headers object whole and secret-like fields, at any depth the paths name (a second line of defence)', async () => {
    const batches: string[][] = [];
    const logger = createLogger('info', { sink: batchedLines((lines) => batches.push(lines)) });
    logger.info(
      { headers: { 'stripe-signature': 't=1,v1=abc', 'user-agent': 'Stripe/1.0' }, req: { headers: { cookie: 'c' } }, source: { secret: 's' }, token: 't' },
      'x',
    );
    await new Promise((r) => setImmediate(r));
    const line = JSON.parse(batches[0]![0]!) as Record<string, unknown>;
    expect(line).toMatchObject({ headers: '[redacted]', req: { headers: '[redacted]' }, source: { secret: '[redacted]' }, token: '[redacted]' });
    expect(batches[0]![0]).not.toMatch(/abc|Stripe\/1\.0|"c"/);
  });

  it('batchedLines hands on the lines of one event-loop turn together, in order', async () => {
    const batches: string[][] = [];
    const logger = createLogger('info', { sink: batchedLines((lines) => batches.push(lines)) });
    logger.info({ n: 1 }, 'a');
    logger.warn({ n: 2 }, 'b');
    expect(batches).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(batches.map((b) => b.map((l) => (JSON.parse(l) as { n: number }).n))).toEqual([[1, 2]]);
  });

  it('pretty: time, level, message, ids and outcome first, the duration last; control characters escaped; colour only when asked', () => {
    const json = JSON.stringify({
      level: 'warn',
      time: '2026-01-02T03:04:05.678Z',
      pid: 1,
      eventType: 'order.paid',
      durationMs: 12.5,
      status: 401,
      outcome: 'unauthorized',
      source: 'shop',
      deliveryId: 'evil\u001b[2Jid',
      error: 'bad signature',
      msg: 'delivery',
    });
    const at = new Date('2026-01-02T03:04:05.678Z');
    const time = `${String(at.getHours()).padStart(2, '0')}:${String(at.getMinutes()).padStart(2, '0')}:05.678`;
    expect(prettyLine(json, false)).toBe(
      `${time} WARN  delivery source=shop outcome=unauthorized status=401 deliveryId=evil\\x1b[2Jid eventType=order.paid error="bad signature" 12.5ms\n`,
    );
    const coloured = prettyLine(json, true);
    expect(coloured).toContain('\u001b[33mWARN \u001b[0m');
    const uncoloured = coloured
      .split('\u001b')
      .map((part, i) => (i === 0 ? part : part.replace(/^\[\d+m/, '')))
      .join('');
    expect(uncoloured).toBe(prettyLine(json, false));
    // An error's stack follows on indented lines, for error and fatal.
    const err = prettyLine(
      JSON.stringify({
        level: 'fatal',
        time: at.toISOString(),
        msg: 'uncaught exception',
        err: { message: 'boom', stack: 'Error: boom\n    at f (x.js:1:1)' },
      }),
      false,
    );
    expect(err).toBe(`${time} FATAL uncaught exception err=boom\n    at f (x.js:1:1)\n`);
  });

  it('log.format auto is pretty on a terminal and JSON elsewhere; NO_COLOR and FORCE_COLOR decide colour before the terminal does', () => {
    const tty = { isTTY: true, hasColors: () => true };
    const pipe = { isTTY: false, hasColors: () => false };
    expect(logStyle('auto', tty, {})).toEqual({ pretty: true, color: true });
    expect(logStyle('auto', pipe, {})).toEqual({ pretty: false, color: false });
    expect(logStyle('json', tty, {})).toEqual({ pretty: false, color: false });
    expect(logStyle('pretty', pipe, {})).toEqual({ pretty: true, color: false });
    expect(logStyle('pretty', pipe, { FORCE_COLOR: '1' })).toEqual({ pretty: true, color: true });
    expect(logStyle('auto', tty, { NO_COLOR: '1' })).toEqual({ pretty: true, color: false });
    expect(logStyle('auto', tty, { NO_COLOR: '' })).toEqual({ pretty: true, color: true });
    expect(logStyle('auto', tty, { FORCE_COLOR: '0' })).toEqual({ pretty: true, color: false });
    expect(logStyle('auto', { isTTY: true }, {})).toEqual({ pretty: true, color: false });
  });
});

describe("the drain's lines come after the delivery lines of their events", () => {
  it('holds them while a delivery that was being stored when they came has not logged its line', () => {
    const out: string[] = [];
    const order = new DrainLinesAfterDeliveries((l) => out.push(l));
    // Nothing being stored: written at once.
    order.add(['effect 0']);
    const first = order.storing();
    const second = order.storing();
    // The drain ran the first delivery's effect before its request logged its line.
    order.add(['effect 1']);
    const third = order.storing(); // started after: it cannot be about event 1
    out.push('delivery 2');
    second();
    expect(out).toEqual(['effect 0', 'delivery 2']);
    out.push('delivery 1');
    first();
    expect(out).toEqual(['effect 0', 'delivery 2', 'delivery 1', 'effect 1']);
    // Held again behind the third delivery only, and kept in order.
    order.add(['effect 3a']);
    order.add(['effect 3b']);
    out.push('delivery 3');
    third();
    expect(out.slice(4)).toEqual(['delivery 3', 'effect 3a', 'effect 3b']);
  });
});
