import type { AlertDestination } from '../config/alerts.js';
import type { Config } from '../config/load.js';
import type { Secret } from '../config/secret.js';
import type { AlertFacts } from '../store/alert-types.js';
import type { AlertMessageKind, AlertStatus } from '../vocabulary.js';

/**
 * What a destination is told about one transition of one alert: the `json` format's object,
 * and the same facts as text (slack, discord, text, exec's stdin) and as RECEIVER_ALERT_*
 * variables (exec). Fields that do not apply are left out.
 */
export interface AlertMessage {
  kind: AlertMessageKind;
  status: AlertStatus;
  summary: string;
  source?: string;
  route?: string;
  eventId?: number;
  deliveryId?: string;
  error?: string;
  /** The admin page of the event (or the admin overview), from `alerts.adminUrl`. */
  url?: string;
  /** When it fired or was resolved, ISO 8601. */
  at: string;
}

/** An error quoted in an alert is cut to this many characters. */
const ERROR_CHARS = 500;

/** Discord refuses a message longer than 2000 characters. */
const DISCORD_CHARS = 2000;

/**
 * Replaces every secret the configuration holds (signing secrets, tokens, credentials, the
 * destinations' own URLs and headers, the database URL's password) with `[secret]`: an
 * error text may quote anything, and an alert leaves the machine.
 */
export class SecretScrubber {
  readonly #values: string[];

  constructor(values: Iterable<string>) {
    // Longest first, so a secret holding another is replaced whole; very short values
    // would mangle ordinary words and protect nothing.
    // A header's credential is also quoted without its scheme ("Bearer ..."), a signing
    // secret without its "whsec_".
    const parts = [...values].flatMap((v) => [v, ...v.split(/\s+/), ...(v.startsWith('whsec_') ? [v.slice(6)] : [])]);
    this.#values = [...new Set(parts)].filter((v) => v.length >= 6).sort((a, b) => b.length - a.length);
  }

  scrub(text: string): string {
    let out = text;
    for (const v of this.#values) out = out.split(v).join('[secret]');
    return out;
  }
}

/** Every secret value a configuration holds, revealed, for the scrubber only. */
export function configSecrets(config: Pick<Config, 'sources' | 'httpSecrets' | 'metrics' | 'admin' | 'catchUp' | 'alerts' | 'database'>): string[] {
  const all: (Secret | undefined)[] = [config.metrics.token, config.admin?.token];
  for (const s of config.sources.values()) all.push(...s.secrets, ...s.keys.values());
  for (const h of config.httpSecrets.values()) all.push(...Object.values(h.headers), h.sign);
  for (const c of config.catchUp.values()) all.push(c.credential);
  for (const d of config.alerts?.destinations ?? []) all.push(d.http?.url, ...Object.values(d.http?.headers ?? {}), d.http?.sign);
  const values = all.filter((s): s is Secret => s !== undefined).map((s) => s.reveal());
  try {
    const password = new URL(config.database).password;
    if (password !== '') values.push(password, decodeURIComponent(password));
  } catch {
    // A file path: no password.
  }
  return values;
}

/** The message for `facts` at `status`, every text scrubbed of secrets. */
export function alertMessage(facts: AlertFacts, status: AlertStatus, at: number, adminUrl: string | undefined, scrubber: SecretScrubber): AlertMessage {
  const clean = (t: string | undefined) => (t === undefined ? undefined : scrubber.scrub(t));
  const error = clean(facts.error === undefined ? undefined : facts.error.length > ERROR_CHARS ? `${facts.error.slice(0, ERROR_CHARS)}...` : facts.error);
  const base = adminUrl?.replace(/\/+$/, '');
  const url = base === undefined ? undefined : facts.eventId === undefined ? base : `${base}/events/${facts.eventId}`;
  const m: AlertMessage = {
    kind: facts.kind,
    status,
    summary: scrubber.scrub(status === 'resolved' ? `Resolved: ${facts.summary}` : facts.summary),
    at: new Date(at).toISOString(),
  };
  if (facts.source !== undefined) m.source = scrubber.scrub(facts.source);
  if (facts.route !== undefined) m.route = facts.route;
  if (facts.eventId !== undefined) m.eventId = facts.eventId;
  if (facts.deliveryId !== undefined) m.deliveryId = scrubber.scrub(facts.deliveryId);
  if (error !== undefined) m.error = error;
  if (url !== undefined) m.url = url;
  return m;
}

/** The message as a few lines of text: the summary, then each fact that applies. */
export function alertText(m: AlertMessage): string {
  const lines = [`[${m.status}] ${m.summary}`];
  const fact = (name: string, value: string | number | undefined) => {
    if (value !== undefined) lines.push(`${name}: ${value}`);
  };
  fact('kind', m.kind);
  fact('source', m.source);
  fact('route', m.route);
  fact('event', m.eventId);
  fact('delivery id', m.deliveryId);
  fact('error', m.error);
  fact('at', m.at);
  fact('see', m.url);
  return lines.join('\n');
}

/** An http destination's body in its format. */
export function httpBody(format: NonNullable<AlertDestination['http']>['format'], m: AlertMessage): { contentType: string; body: Buffer } {
  switch (format) {
    case 'json':
      return { contentType: 'application/json', body: Buffer.from(JSON.stringify(m)) };
    case 'slack':
      return { contentType: 'application/json', body: Buffer.from(JSON.stringify({ text: alertText(m) })) };
    case 'discord': {
      const text = alertText(m);
      return {
        contentType: 'application/json',
        body: Buffer.from(JSON.stringify({ content: text.length > DISCORD_CHARS ? `${text.slice(0, DISCORD_CHARS - 3)}...` : text })),
      };
    }
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: Buffer.from(alertText(m)) };
  }
}

/** An exec destination's variables: RECEIVER_ALERT_<FIELD> for each field that applies. */
export function alertEnvironment(m: AlertMessage): Record<string, string> {
  const env: Record<string, string> = {};
  const names: [keyof AlertMessage, string][] = [
    ['kind', 'KIND'],
    ['status', 'STATUS'],
    ['summary', 'SUMMARY'],
    ['source', 'SOURCE'],
    ['route', 'ROUTE'],
    ['eventId', 'EVENT_ID'],
    ['deliveryId', 'DELIVERY_ID'],
    ['error', 'ERROR'],
    ['url', 'URL'],
    ['at', 'AT'],
  ];
  // A NUL byte cannot be passed in an environment: it is dropped rather than failing the send.
  for (const [field, name] of names) if (m[field] !== undefined) env[`RECEIVER_ALERT_${name}`] = String(m[field]).replaceAll('\0', '');
  return env;
}
