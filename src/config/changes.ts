import { ReceiverError } from '../errors.js';
import type { Config } from './load.js';
import { Secret } from './secret.js';

/**
 * What a reload changes, by name, never by value: serve logs it as its `config reloaded`
 * line, and refuses a reload that changes what only a restart can apply.
 */
export interface ConfigChanges {
  sources: { added: string[]; removed: string[]; changed: string[] };
  routes: { added: string[]; removed: string[]; changed: string[] };
  /** Secrets whose value changed (the same field, another value), by field. */
  secretsRotated: string[];
  /** Variables exec effects are given (`effect.env`) whose value changed. */
  environment: string[];
  /** Other settings that changed (retry, maxBodyBytes, metrics, admin, ...), by top-level field. */
  settings: string[];
}

/**
 * What a running serve cannot take in: the listener's address, the database, whether a
 * drain runs and how it claims, the user it became, and what its log writer and database
 * connections were built with.
 */
const RESTART_FIELDS: readonly [string, (c: Config) => unknown][] = [
  ['host', (c) => c.host],
  ['port', (c) => c.port],
  ['database', (c) => c.database],
  ['user', (c) => c.user],
  ['pidFile', (c) => c.pidFile],
  ['drain.enabled', (c) => c.drain.enabled],
  ['drain.leaseSeconds', (c) => c.drain.leaseSeconds],
  ['drain.pollMs', (c) => c.drain.pollMs],
  ['busyTimeoutMs', (c) => c.busyTimeoutMs],
  ['log.level', (c) => c.log.level],
  ['log.format', (c) => c.log.format],
  ['log.bufferBytes', (c) => c.log.bufferBytes],
];

/** Top-level fields compared as a whole, besides sources and routes (the restart fields are refused before). */
const SETTINGS_SKIPPED = new Set(['file', 'sources', 'routes', 'httpSecrets', 'catchUp', ...RESTART_FIELDS.map(([name]) => name.split('.')[0]!)]);

/**
 * A reload that changes a restart field is refused as a whole, naming each field
 * ("port: needs a restart"): nothing of it is applied.
 */
export function assertReloadable(running: Config, next: Config): void {
  const fields = RESTART_FIELDS.filter(([, get]) => get(running) !== get(next)).map(([name]) => name);
  if (fields.length === 0) return;
  throw new RestartNeeded(fields, next.file);
}

/** A reload refused because it changes restart fields (`fields`, by name); a `config` error. */
export class RestartNeeded extends ReceiverError {
  constructor(
    readonly fields: string[],
    file: string,
  ) {
    super('config', `${file}: ${fields.map((f) => `${f}: needs a restart`).join('; ')}; nothing of this reload was applied`, {
      hint: `restart the service to apply ${fields.join(', ')} (systemctl restart receiver), or change ${fields.length === 1 ? 'it' : 'them'} back and reload`,
    });
  }
}

export function configChanges(running: { config: Config; env: NodeJS.ProcessEnv }, next: { config: Config; env: NodeJS.ProcessEnv }): ConfigChanges {
  const sourceText = (c: Config) =>
    new Map(
      [...c.sources].map(([name, s]) => [name, JSON.stringify({ ...s, provider: s.provider.name, keys: [...s.keys.keys()], catchUp: c.catchUp.get(name) })]),
    );
  const routeText = (c: Config) => new Map(c.routes.map((r) => [r.name, JSON.stringify(r)]));
  const oldSecrets = secretsByField(running.config);
  const rotated = [...secretsByField(next.config)]
    .filter(([field, s]) => oldSecrets.has(field) && oldSecrets.get(field)?.reveal() !== s.reveal())
    .map(([f]) => f);
  const listed = new Set([...running.config.routes, ...next.config.routes].flatMap((r) => r.effect.env ?? []));
  const settings = Object.keys({ ...running.config, ...next.config }).filter(
    (k) => !SETTINGS_SKIPPED.has(k) && JSON.stringify(running.config[k as keyof Config]) !== JSON.stringify(next.config[k as keyof Config]),
  );
  return {
    sources: compare(sourceText(running.config), sourceText(next.config)),
    routes: compare(routeText(running.config), routeText(next.config)),
    secretsRotated: rotated,
    environment: [...listed].filter((name) => running.env[name] !== next.env[name]).sort(),
    settings,
  };
}

/** Whether a reload changed nothing at all. */
export function unchanged(c: ConfigChanges): boolean {
  return [
    c.sources.added,
    c.sources.removed,
    c.sources.changed,
    c.routes.added,
    c.routes.removed,
    c.routes.changed,
    c.secretsRotated,
    c.environment,
    c.settings,
  ].every((l) => l.length === 0);
}

function compare(before: Map<string, string>, after: Map<string, string>): { added: string[]; removed: string[]; changed: string[] } {
  return {
    added: [...after.keys()].filter((k) => !before.has(k)),
    removed: [...before.keys()].filter((k) => !after.has(k)),
    changed: [...after].filter(([k, v]) => before.has(k) && before.get(k) !== v).map(([k]) => k),
  };
}

/** Every resolved secret of a configuration, by the field it comes from (sources.<name>.secrets.0, routes.<name>.effect.http.sign, admin.token, ...). */
function secretsByField(config: Config): Map<string, Secret> {
  const found = new Map<string, Secret>();
  const walk = (value: unknown, path: string, seen: Set<unknown>) => {
    if (value instanceof Secret) return void found.set(path, value);
    if (value === null || typeof value !== 'object' || seen.has(value)) return;
    seen.add(value);
    const entries = value instanceof Map ? [...value.entries()] : Object.entries(value);
    for (const [k, v] of entries) walk(v, `${path}.${String(k)}`, seen);
  };
  for (const [name, s] of config.sources) walk({ secrets: s.secrets, keys: s.keys }, `sources.${name}`, new Set());
  for (const [name, c] of config.catchUp) if (c.credential !== undefined) found.set(`sources.${name}.catchUp`, c.credential);
  for (const [name, h] of config.httpSecrets) walk(h, `routes.${name}.effect.http`, new Set());
  if (config.alerts !== undefined) walk(config.alerts, 'alerts', new Set());
  if (config.metrics.token !== undefined) found.set('metrics.token', config.metrics.token);
  if (config.admin !== undefined) found.set('admin.token', config.admin.token);
  return found;
}
