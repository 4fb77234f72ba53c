// The baseline: a bare Hono server that reads the body and answers 202, storing nothing.
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

const app = new Hono();
app.post('/webhooks/:source', async (c) => {
  await c.req.arrayBuffer();
  return c.json({ status: 'accepted', id: 0 }, 202);
});
const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
  process.stderr.write(`${JSON.stringify({ msg: 'listening', port: info.port })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
