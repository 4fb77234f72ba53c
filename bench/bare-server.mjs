// The baseline: a bare Hono server that reads the body and answers 202, storing nothing.
// GET /metrics gives its event-loop delay p99 since the previous GET, sampled as the
// receiver's prom-client default metrics do (monitorEventLoopDelay, 10 ms resolution).
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const delay = monitorEventLoopDelay({ resolution: 10 });
delay.enable();
const app = new Hono();
app.post('/webhooks/:source', async (c) => {
  await c.req.arrayBuffer();
  return c.json({ status: 'accepted', id: 0 }, 202);
});
app.get('/metrics', (c) => {
  const p99 = delay.percentile(99) / 1e9;
  delay.reset();
  return c.text(`nodejs_eventloop_lag_p99_seconds ${p99}\n`);
});
const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
  process.stderr.write(`${JSON.stringify({ msg: 'listening', port: info.port })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
