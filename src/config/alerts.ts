import { ReceiverError } from '../errors.js';
import { ALERT_KINDS, type AlertKind } from '../vocabulary.js';
import { httpEffectSecrets } from './load.js';
import type { AlertsConfig } from './schema.js';
import { resolveSecret, Secret, type ReadText } from './secret.js';

/** An alert destination, its secrets resolved (none when loaded without secrets). */
export interface AlertDestination {
  name: string;
  /** The kinds it is told about. */
  on: readonly AlertKind[];
  timeoutMs: number;
  http?: {
    /** Undefined when loaded without secrets (operator commands send nothing). */
    url: Secret | undefined;
    format: 'json' | 'slack' | 'discord' | 'text';
    headers: Readonly<Record<string, Secret>>;
    sign: Secret | undefined;
  };
  exec?: readonly string[];
}

export interface AlertSettings {
  failingAfter: number;
  stuckMinutes: number;
  maxPerHour: number;
  adminUrl: string | undefined;
  checkMs: number;
  destinations: readonly AlertDestination[];
}

const isHttpUrl = (text: string) => {
  try {
    const u = new URL(text);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
};

/**
 * `alerts`, checked and resolved: each destination's URL (a secret reference or a literal:
 * a chat's webhook URL is a credential, never quoted in a message), headers and signing
 * secret. Problems are pushed, each naming its field.
 */
export function alertSettings(
  raw: AlertsConfig,
  withoutSecrets: boolean,
  env: NodeJS.ProcessEnv,
  read: ReadText,
  problems: string[],
): AlertSettings | undefined {
  const found = problems.length;
  const names = new Set<string>();
  const destinations = raw.destinations.map((d, i): AlertDestination => {
    const field = `alerts.destinations.${i}`;
    if (names.has(d.name)) problems.push(`${field}.name: "${d.name}" names two destinations (alerts test --to picks one by its name)`);
    names.add(d.name);
    const base = { name: d.name, on: d.on ?? ALERT_KINDS, timeoutMs: d.timeoutSeconds * 1000 };
    if (d.exec !== undefined) return { ...base, exec: d.exec };
    const http = d.http!;
    let url: Secret | undefined;
    if (!withoutSecrets || !(http.url.startsWith('env:') || http.url.startsWith('file:'))) {
      try {
        url = resolveSecret(http.url, `${field}.http.url`, env, read);
        if (!isHttpUrl(url.reveal())) problems.push(`${field}.http.url: must be an http:// or https:// URL (the value is not quoted: it may hold a token)`);
      } catch (e) {
        if (!(e instanceof ReceiverError)) throw e;
        problems.push(e.message + (e.hint === undefined ? '' : ` (try: ${e.hint})`));
      }
    }
    const secrets = httpEffectSecrets(`${field}.http`, http, withoutSecrets, env, read, problems);
    return { ...base, http: { url, format: http.format, headers: secrets?.headers ?? {}, sign: secrets?.sign } };
  });
  if (problems.length > found) return undefined;
  return {
    failingAfter: raw.failingAfter,
    stuckMinutes: raw.stuckMinutes,
    maxPerHour: raw.maxPerHour,
    adminUrl: raw.adminUrl,
    checkMs: raw.checkSeconds * 1000,
    destinations,
  };
}
