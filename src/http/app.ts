import { Hono, type Context } from 'hono';
import { ReceiverError } from '../errors.js';
import type { RouteConfig } from '../config/schema.js';
import type { ResolvedSource } from '../providers/types.js';
import type { IngestResult, Store } from '../store/types.js';
import { healthHandler, ingestHealth, RETRY_AFTER_SECONDS, type IngestHealth } from './health.js';
import { ingestHandler, type DeliveryOutcome } from './ingest.js';
import { createAdmin, type AdminOptions } from './admin/index.js';

export interface AppOptions {
  sources: ReadonlyMap<string, ResolvedSource>;
  store: Store;
  maxBodyBytes: number;
  now?: () => number;
  onOutcome?: (o: DeliveryOutcome) => void;
  onAccepted?: (r: IngestResult) => void;
  /** See IngestHandlerOptions.onStoring. */
  onStoring?: () => () => void;
  /** The configured routes: a delivery none of them applies to is stored done (see ingest.ts). */
  routes?: readonly RouteConfig[] | undefined;
  /** Extra routes (metrics) mounted by the caller. */
  extend?: (app: Hono) => void;
  /** The admin pages and API at /admin (off when absent). */
  admin?: Omit<AdminOptions, 'store'> | undefined;
  /** Unexpected errors (500s) are reported here; the client sees no detail. */
  onError?: (e: unknown) => void;
  /** Ingest's recent outcome for /healthz; default: this app's own (serve shares one across the apps its reloads build). */
  health?: IngestHealth;
}

/** The one place errors become HTTP answers. Never a stack trace to a client. */
function errorResponse(e: unknown, c: Context, onError?: (e: unknown) => void): Response {
  if (e instanceof ReceiverError) {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (e.httpStatus === 503) headers['retry-after'] = String(RETRY_AFTER_SECONDS);
    // 503s say only that the store is unavailable; the cause goes to the log.
    const message = e.httpStatus === 503 ? 'temporarily unavailable, retry later' : e.message;
    // A 503 is an expected answer while the store is unavailable, and the delivery line
    // already says why (one line, no stack); only other 5xx are worth a stack.
    if (e.httpStatus >= 500 && e.httpStatus !== 503) onError?.(e);
    return c.body(JSON.stringify({ error: e.kind, message }), e.httpStatus as 400, headers);
  }
  onError?.(e);
  return c.body(JSON.stringify({ error: 'internal', message: 'internal error' }), 500, { 'content-type': 'application/json' });
}

export function createApp(options: AppOptions): Hono {
  const app = new Hono();
  const health = options.health ?? ingestHealth();
  const onOutcome = (o: DeliveryOutcome) => {
    health.observe(o.outcome);
    options.onOutcome?.(o);
  };
  app.post('/webhooks/:source', ingestHandler({ ...options, onOutcome }));
  app.get('/healthz', healthHandler({ ping: () => options.store.ping(), ingest: health }));
  options.extend?.(app);
  if (options.admin !== undefined) app.route('/admin', createAdmin({ ...options.admin, store: options.store }));
  app.notFound((c) => c.json({ error: 'not_found', message: 'no such route; deliveries go to POST /webhooks/<source>' }, 404));
  app.onError((e, c) => errorResponse(e, c, options.onError));
  return app;
}
