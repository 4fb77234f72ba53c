import { z } from 'zod';
import { LOG_BUFFER_BYTES } from '../log.js';
import { ALERT_KINDS, LOG_FORMATS } from '../vocabulary.js';

/**
 * The configuration file's shape (the README's Configuration section). Every object is strict: an unknown
 * field is an error naming it, because a typo such as "secrests" must not silently
 * leave a source unverified.
 */

const secretRef = z.string().min(1, 'must not be empty');

/** An HTTP header name (an RFC 9110 token): a name no request can carry would refuse every delivery. */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const headerName = () => z.string().regex(HEADER_NAME, 'is not a valid HTTP header name');

/** Effects POST and Twilio signs over http(s) only: `file:///...` would be a network error retried forever. */
const httpUrl = () => z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' });

const sourceSchema = z.strictObject({
  provider: z.string().min(1),
  secret: secretRef.optional(),
  secrets: z.array(secretRef).min(1).optional(),
  /** Secrets chosen by the key id the sender names (MailWebhook's kid). */
  keys: z.record(z.string(), secretRef).optional(),
  toleranceSeconds: z.number().int().positive().optional(),
  onConflict: z.enum(['reject', 'accept']).default('reject'),
  successStatus: z.number().int().min(200).max(299).optional(),
  retryHorizonHours: z.number().positive().optional(),
  /**
   * The same body under a new delivery id within the retry horizon is a duplicate. Default:
   * on where the provider's delivery id is outside the signature (GitHub, Shopify, ...).
   */
  dedupeByBody: z.boolean().optional(),
  // Generic HMAC (`hmac-sha256`) and the template-driven providers.
  header: headerName().optional(),
  prefix: z.string().optional(),
  encoding: z.enum(['hex', 'base64']).optional(),
  timestampHeader: headerName().optional(),
  signedPayload: z.string().min(1).optional(),
  deliveryId: z.string().min(1).optional(),
  eventType: z.string().min(1).optional(),
  /** Standard Webhooks: `base64` (the spec, Svix) or `utf8` (Polar's SDK uses the whole secret). */
  secretEncoding: z.enum(['base64', 'utf8']).optional(),
  /** Twilio signs the public URL it called; behind a proxy that is not the URL we see. */
  publicUrl: httpUrl().optional(),
  /** Recover deliveries the sender gave up on, through its API (src/catchup/). */
  catchUp: z
    .strictObject({
      /** The API credential (Stripe, Paddle), a secret reference. */
      apiKey: secretRef.optional(),
      /** The API credential (GitHub, GitLab), a secret reference. */
      token: secretRef.optional(),
      /** GitHub: repos/<owner>/<repo>/hooks/<id> or orgs/<org>/hooks/<id>; GitLab: projects/<id>/hooks/<hook_id>. */
      hook: z.string().min(1).optional(),
      /** Paddle: the ntfset_... destination whose failed notifications to replay. */
      notificationSettingId: z.string().min(1).optional(),
      /** Default: the sender's public API. GitHub Enterprise, self-managed GitLab, tests. */
      apiBase: httpUrl().optional(),
      everyMinutes: z.number().positive().default(15),
      /** Requests to the sender's API per run, at most. */
      maxRequests: z.number().int().positive().default(100),
      /** Events stored (Stripe) or redeliveries asked (the others) per run, at most. */
      maxEvents: z.number().int().positive().default(1000),
      /** One request to the API, from connecting to the answer's last byte. */
      timeoutSeconds: z.number().positive().default(30),
      /** A whole run; past it the run stops and the next one continues where it stopped. */
      maxRunSeconds: z.number().positive().default(600),
      /** An answer from the API longer than this is refused, unread. */
      maxResponseBytes: z.number().int().positive().default(8_388_608),
    })
    .optional(),
});

const effectSchema = z
  .strictObject({
    exec: z.array(z.string().min(1)).min(1).optional(),
    http: z
      .strictObject({
        url: httpUrl(),
        /** Values are literals, or secret references (env:NAME, file:PATH) resolved at load. */
        headers: z.record(z.string(), z.string()).optional(),
        /** Sign each forward (Standard Webhooks) with this `whsec_<base64>` secret: a literal, env:NAME or file:PATH. */
        sign: secretRef.optional(),
        /** The app's answer is read up to this many bytes (only its tail is kept), then left. */
        maxResponseBytes: z.number().int().positive().default(1_048_576),
      })
      .optional(),
    module: z.string().min(1).optional(),
    /**
     * exec: variables of the service's environment passed on to the command, by name,
     * besides the minimal ones (PATH, HOME, LANG, LC_*, TZ). Checked in load.ts.
     */
    env: z.array(z.string()).optional(),
    timeoutSeconds: z.number().positive().default(30),
  })
  .refine((e) => [e.exec, e.http, e.module].filter((x) => x !== undefined).length === 1, {
    message: 'set exactly one of "exec", "http" or "module"',
  });

const routeSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/, 'use letters, digits, "_", "-" and "." only'),
  source: z.string().min(1),
  events: z.array(z.string().min(1)).min(1).default(['*']),
  filter: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()])).optional(),
  key: z.string().min(1),
  version: z.string().min(1).optional(),
  /** The lane the route's effects run in: one at a time per lane, lanes side by side. Default: the route's name. */
  lane: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'use letters, digits, "_", "-" and "." only')
    .optional(),
  effect: effectSchema,
});

/** Where alerts go: an HTTP endpoint (a chat's incoming webhook, ntfy) or a command (sendmail). */
const alertDestinationSchema = z
  .strictObject({
    name: z.string().regex(/^[A-Za-z0-9_.-]+$/, 'use letters, digits, "_", "-" and "." only'),
    http: z
      .strictObject({
        /** A secret reference (env:NAME, file:PATH) or a literal http(s) URL: a chat's webhook URL is a credential. */
        url: secretRef,
        format: z.enum(['json', 'slack', 'discord', 'text']).default('json'),
        /** Values are literals, or secret references resolved at load. */
        headers: z.record(z.string(), z.string()).optional(),
        /** Sign each alert (Standard Webhooks) with this `whsec_<base64>` secret, as the http effect does. */
        sign: secretRef.optional(),
      })
      .optional(),
    /** argv (no shell); the alert's text on stdin, its fields in RECEIVER_ALERT_* variables. */
    exec: z.array(z.string().min(1)).min(1).optional(),
    /** The kinds this destination is told about; default every kind. */
    on: z.array(z.enum(ALERT_KINDS)).min(1).optional(),
    /** One try, connection to answer (or the command's run). */
    timeoutSeconds: z.number().positive().max(300).default(10),
  })
  .refine((d) => (d.http === undefined) !== (d.exec === undefined), { message: 'set exactly one of "http" or "exec"' });

const alertsSchema = z.strictObject({
  /** A route that failed this many attempts in a row, across events, is `failing`. */
  failingAfter: z.number().int().positive().default(3),
  /** Due work (or an expired lease) untouched this long is `stuck`. */
  stuckMinutes: z.number().positive().default(15),
  /** Alerts per destination per hour; past it, one summary instead. */
  maxPerHour: z.number().int().positive().default(20),
  /** The admin pages' public URL: an alert about an event links to its page. */
  adminUrl: httpUrl().optional(),
  /** How often serve looks for failures to alert about and sends what is due. */
  checkSeconds: z.number().positive().max(3600).default(10),
  destinations: z.array(alertDestinationSchema).min(1),
});

/** A user name as useradd takes it. */
export const USER_NAME = /^[A-Za-z_][A-Za-z0-9_.-]*\$?$/;

export const configSchema = z.strictObject({
  database: z.string().min(1).default('./data/receiver.db'),
  /**
   * The service's user: a receiver process started as root reads its configuration and
   * secrets, then becomes this user (src/config/service-user.ts).
   */
  user: z.string().regex(USER_NAME, 'a user name: letters, digits, "_", "-" and "."').optional(),
  /**
   * NAME=value lines receiver reads itself, at start and at every reload (src/config/env-file.ts):
   * variables of the real environment win over it.
   */
  envFile: z.string().min(1).optional(),
  /**
   * serve writes its process id here once it listens, and the outcome of each reload beside
   * it (`<pidFile>.reload.json`), for `receiver reload`; both are removed on a clean exit.
   */
  pidFile: z.string().min(1).optional(),
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(8080),
  maxBodyBytes: z.number().int().positive().default(1_048_576),
  /** How long an insert waits for another process's write lock before answering 503. */
  busyTimeoutMs: z.number().int().nonnegative().default(5000),
  sources: z.record(z.string().regex(/^[A-Za-z0-9_.-]+$/, 'use letters, digits, "_", "-" and "."'), sourceSchema).default({}),
  routes: z.array(routeSchema).default([]),
  retry: z
    .strictObject({
      maxAttempts: z.number().int().positive().default(12),
      baseSeconds: z.number().positive().default(10),
      maxSeconds: z.number().positive().default(3600),
    })
    .default({ maxAttempts: 12, baseSeconds: 10, maxSeconds: 3600 }),
  drain: z
    .strictObject({
      enabled: z.boolean().default(true),
      /**
       * A claim's lease. A live drain renews it every third of the lease while it holds the
       * claim (effects may run longer); a dead process's claims are retried once it expires.
       */
      leaseSeconds: z.number().positive().default(30),
      /** How often an idle drain looks for work written by another process (replay). */
      pollMs: z.number().int().positive().default(1000),
      /** How many units (one route of one event) run at once, each in a lane of its own. */
      maxConcurrent: z.number().int().positive().default(8),
    })
    .default({ enabled: true, leaseSeconds: 30, pollMs: 1000, maxConcurrent: 8 }),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
      /** `auto`: readable lines when stderr is a terminal, JSON lines otherwise (journald, a pipe, a file). */
      format: z.enum(LOG_FORMATS).default('auto'),
      /** The bound of the buffer in front of stderr: past it, new lines are dropped and counted, and ingest never waits for the reader. */
      bufferBytes: z.number().int().min(16_384).default(LOG_BUFFER_BYTES),
    })
    .default({ level: 'info', format: 'auto', bufferBytes: LOG_BUFFER_BYTES }),
  metrics: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** Optional bearer token for GET /metrics (literal, env:NAME or file:PATH). */
      token: secretRef.optional(),
    })
    .default({ enabled: true }),
  /** The admin pages and API at /admin on the serve listener; absent: off. */
  admin: z.strictObject({ token: secretRef }).optional(),
  /** Alerts to a chat, a mailbox or a command when routes fail, work is stuck, catch-up or ingest fails; absent: off. */
  alerts: alertsSchema.optional(),
  /**
   * SIGTERM: how long the running effects may finish before they are stopped (and run again
   * after the restart). The default is the default effect.timeoutSeconds: an effect within
   * its default bound is never cut by a stop.
   */
  shutdownGraceSeconds: z.number().nonnegative().default(30),
  /** Slow or stalled clients are cut off after this long. */
  requestTimeoutSeconds: z.number().positive().default(30),
});

export type RawConfig = z.infer<typeof configSchema>;
export type SourceConfig = z.infer<typeof sourceSchema>;
export type RouteConfig = z.infer<typeof routeSchema>;
export type AlertsConfig = z.infer<typeof alertsSchema>;
