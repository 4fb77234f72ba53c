import { resolve } from 'node:path';
import type { z } from 'zod';
import { configError, ReceiverError } from '../errors.js';
import { providerNames, providers } from '../providers/registry.js';
import { PROVIDER_FIELDS, type Provider, type ResolvedSource } from '../providers/types.js';
import { HEADERS_SET_BY_RECEIVER, SIGNATURE_HEADERS, signingKeyProblem, type HttpSecrets } from '../effects/http.js';
import { ENV_NAME, isReceiverVariable } from '../effects/exec.js';
import { checkTemplate } from '../template.js';
import { configSchema, HEADER_NAME, USER_NAME, type RawConfig, type RouteConfig, type SourceConfig } from './schema.js';
import { isPostgresUrl } from './database.js';
import { locateJsonError } from './json-position.js';
import { readText, resolveSecret, Secret, type ReadText } from './secret.js';
import { withEnvFile } from './env-file.js';
import { catchUpSenders } from '../catchup/senders.js';
import { isOneOf, LOG_FORMATS } from '../vocabulary.js';
import type { CatchUpSettings } from '../catchup/types.js';
import { alertSettings, type AlertSettings } from './alerts.js';

/** An admin token shorter than this is refused: it is the only thing between the web and replay. */
const ADMIN_TOKEN_MIN_LENGTH = 32;

export interface Config extends Omit<RawConfig, 'sources' | 'metrics' | 'admin' | 'alerts'> {
  /** Where the configuration came from (for messages). */
  file: string;
  /** The environment file read with it (serve --env-file, $RECEIVER_ENV_FILE or `envFile`), if any. */
  envFile?: string | undefined;
  sources: ReadonlyMap<string, ResolvedSource>;
  routes: RouteConfig[];
  metrics: { enabled: boolean; token: Secret | undefined };
  /** Set when the admin pages are on (and secrets were resolved). */
  admin: { token: Secret } | undefined;
  /** Sources with `catchUp` set, by source name. */
  catchUp: ReadonlyMap<string, CatchUpSettings>;
  /** Each http effect's header values and signing secret, resolved, by route name (none when loaded without secrets). */
  httpSecrets: ReadonlyMap<string, HttpSecrets>;
  /** Set when alerts are on (src/alerts/). */
  alerts: AlertSettings | undefined;
}

/** Values from flags; they win over the environment, which wins over the file. */
export interface ConfigOverrides {
  config?: string;
  db?: string;
  host?: string;
  port?: number;
  logLevel?: string;
  logFormat?: string;
  /** The service's user (serve --user). */
  user?: string;
  /** serve --env-file: wins over $RECEIVER_ENV_FILE and `envFile`. */
  envFile?: string;
  /** serve --pid-file, reload --pid-file: win over $RECEIVER_PID_FILE and `pidFile`. */
  pidFile?: string;
  /**
   * Operator commands (events, stats, replay, purge) verify nothing: they load the
   * configuration without resolving secrets, so they run without the service's secrets.
   */
  withoutSecrets?: boolean;
}

const DEFAULT_CONFIG_FILE = './receiver.config.json';

function fieldPath(path: readonly PropertyKey[]): string {
  return path.map(String).join('.') || '(top level)';
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') {
    const where = issue.path.length === 0 ? '' : `${fieldPath(issue.path)}.`;
    return issue.keys.map((k) => `${where}${k}: unknown field (check the spelling against the README's configuration section)`).join('\n');
  }
  return `${fieldPath(issue.path)}: ${issue.message}`;
}

/** Reads, validates and resolves the configuration. Throws `config` errors naming the field. */
export function loadConfig(overrides: ConfigOverrides = {}, env: NodeJS.ProcessEnv = process.env, read: ReadText = readText): Config {
  return loadConfigAndEnv(overrides, env, read).config;
}

/**
 * loadConfig, with the environment it was resolved against: `env` with the environment
 * file's variables under it (its own win). serve gives it to the effects.
 */
export function loadConfigAndEnv(
  overrides: ConfigOverrides = {},
  env: NodeJS.ProcessEnv = process.env,
  read: ReadText = readText,
): { config: Config; env: NodeJS.ProcessEnv } {
  const file = overrides.config ?? env.RECEIVER_CONFIG ?? DEFAULT_CONFIG_FILE;
  let text: string;
  try {
    text = read(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw configError(
      `cannot read configuration file ${file} (${code ?? 'error'})`,
      code === 'ENOENT' ? `cp contrib/receiver.example.json ${file}, or pass -c <file>` : `check the permissions of ${file}`,
    );
  }
  // A byte-order mark some editors write is not part of the JSON.
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    // file:line:column, as compilers write it: editors and terminals jump there.
    const at = locateJsonError(text, e as Error);
    throw configError(
      `${file}:${at.line}:${at.column}: not valid JSON: ${at.reason}`,
      `fix the JSON syntax at line ${at.line}, column ${at.column} (a trailing comma or a missing comma on the line before is a common cause)`,
    );
  }
  const withFile = withEnvFile(json, overrides, env, read);
  const config = resolveConfig(json, file, overrides, withFile.env, read);
  return { config: withFile.path === undefined ? config : { ...config, envFile: withFile.path }, env: withFile.env };
}

/**
 * Every `__proto__` key in the parsed JSON, by path. Validation copies maps (sources, keys,
 * filters, headers) into plain objects, where that key sets the prototype instead of a
 * field: the entry would vanish without a word (a filter would match every event). It is
 * refused instead; `constructor`, `toString` and other names work like any other.
 */
function protoKeys(value: unknown, path: string[] = []): string[] {
  if (value === null || typeof value !== 'object') return [];
  const found: string[] = [];
  for (const [k, v] of Object.entries(value)) {
    if (k === '__proto__') found.push(fieldPath([...path, k]));
    found.push(...protoKeys(v, [...path, k]));
  }
  return found;
}

/** Fields a source sets that its provider does not read, as problems naming who reads them. */
function unusedFields(field: string, options: SourceConfig, provider: Provider): string[] {
  const problems: string[] = [];
  for (const f of PROVIDER_FIELDS) {
    if (options[f] === undefined || provider.fields.includes(f)) continue;
    const readers = providerNames().filter((n) => providers.get(n)?.fields.includes(f));
    problems.push(
      `${field}.${f}: provider "${provider.name}" does not use this field, it would be silently ignored (it is read by ${readers.join(', ')}; remove it, or check "provider")`,
    );
  }
  if (!provider.needsSecret) {
    for (const f of ['secret', 'secrets'] as const) {
      if (options[f] !== undefined)
        problems.push(`${field}.${f}: provider "${provider.name}" verifies nothing, so no secret is checked (remove it, or choose the sender's provider)`);
    }
  }
  return problems;
}

/** A header value fetch will send: no line breaks, NUL or characters past U+00FF. */
const HEADER_VALUE = /^[\t\u0020-\u007e\u0080-\u00ff]*$/;

/** A header value that names a secret (env:NAME, file:PATH) rather than being one. */
const isSecretRef = (value: string) => value.startsWith('env:') || value.startsWith('file:');

/**
 * An http effect's configured headers, checked now: fetch refuses a bad one on every
 * request, which would retry each event as a network error until it is dead; and a
 * header receiver sets itself would be overwritten without a word. Values that are secret
 * references are resolved here (a missing variable or file is this field's error); no
 * message quotes a value. Without secrets (operator commands), nothing is resolved.
 */
export function httpEffectSecrets(
  field: string,
  http: Pick<NonNullable<RouteConfig['effect']['http']>, 'headers' | 'sign'>,
  withoutSecrets: boolean,
  env: NodeJS.ProcessEnv,
  read: ReadText,
  problems: string[],
): HttpSecrets | undefined {
  const found = problems.length;
  const reserved = [...HEADERS_SET_BY_RECEIVER, ...(http.sign === undefined ? [] : SIGNATURE_HEADERS)];
  const headers: Record<string, Secret> = {};
  const seen = new Set<string>();
  for (const [name, ref] of Object.entries(http.headers ?? {})) {
    const f = `${field}.headers.${name}`;
    const lower = name.toLowerCase();
    if (!HEADER_NAME.test(name)) problems.push(`${f}: is not a valid HTTP header name (letters, digits and !#$%&'*+.^_\`|~- only)`);
    else if (reserved.includes(lower))
      problems.push(
        `${f}: receiver sets this header on every request${SIGNATURE_HEADERS.includes(lower) ? ' it signs' : ''}, so this value would be ignored (remove it)`,
      );
    else if (seen.has(lower)) problems.push(`${f}: set twice (header names are case-insensitive)`);
    seen.add(lower);
    if (withoutSecrets && isSecretRef(ref)) continue;
    let value: Secret;
    try {
      value = isSecretRef(ref) ? resolveSecret(ref, f, env, read) : new Secret(ref);
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      problems.push(e.message + (e.hint === undefined ? '' : ` (try: ${e.hint})`));
      continue;
    }
    if (!HEADER_VALUE.test(value.reveal()))
      problems.push(`${f}: the value holds a line break, a control character or a character past U+00FF, which HTTP cannot send`);
    headers[name] = value;
  }
  let sign: Secret | undefined;
  if (http.sign !== undefined && !withoutSecrets) {
    try {
      sign = resolveSecret(http.sign, `${field}.sign`, env, read);
      const problem = signingKeyProblem(sign);
      if (problem !== undefined)
        problems.push(`${field}.sign: ${problem} (try: echo "whsec_$(openssl rand -base64 32)" makes one; give the app the same secret)`);
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      problems.push(e.message + (e.hint === undefined ? '' : ` (try: ${e.hint})`));
    }
  }
  if (problems.length > found || withoutSecrets) return undefined;
  return { headers, sign };
}

/**
 * An exec effect's `effect.env`: names a command may be given from the service's
 * environment. A name missing from the environment is an error where secrets are read
 * (serve, check-config): the command would run without it and fail later, retried until dead.
 */
function effectEnvProblems(field: string, effect: RouteConfig['effect'], checkPresent: boolean, env: NodeJS.ProcessEnv): string[] {
  if (effect.exec === undefined) return [`${field}.env: only an exec effect starts a command with an environment (remove "env", or use "exec")`];
  const problems: string[] = [];
  effect.env?.forEach((name, i) => {
    const at = `${field}.env.${i}`;
    if (!ENV_NAME.test(name)) problems.push(`${at}: "${name}" is not a variable name (letters, digits and "_", not starting with a digit)`);
    else if (isReceiverVariable(name))
      problems.push(
        `${at}: ${name}: RECEIVER_* variables are receiver's own settings and the event variables it sets itself; they are never passed on (rename the variable)`,
      );
    else if (checkPresent && env[name] === undefined)
      problems.push(
        `${at}: ${name} is not set in receiver's environment (set it where the service gets its environment, e.g. /etc/receiver/env, or remove it from the list)`,
      );
  });
  return problems;
}

export function resolveConfig(
  json: unknown,
  file: string,
  overrides: ConfigOverrides = {},
  env: NodeJS.ProcessEnv = process.env,
  read: ReadText = readText,
): Config {
  const reserved = protoKeys(json);
  if (reserved.length > 0) {
    throw configError(
      `${file}: invalid configuration\n${reserved.map((p) => `${p}: "__proto__" cannot be used as a name`).join('\n')}`,
      'rename it (sources, key ids, filter paths and header names may not be "__proto__")',
    );
  }
  const parsed = configSchema.safeParse(json);
  if (!parsed.success) {
    throw configError(`${file}: invalid configuration\n${parsed.error.issues.map(describeIssue).join('\n')}`, 'see the configuration section of the README');
  }
  const raw = parsed.data;

  const database = overrides.db ?? env.RECEIVER_DB ?? raw.database;
  const host = overrides.host ?? env.RECEIVER_HOST ?? raw.host;
  const pidFile = overrides.pidFile ?? (env.RECEIVER_PID_FILE === '' ? undefined : env.RECEIVER_PID_FILE) ?? raw.pidFile;
  const user = overrides.user ?? (env.RECEIVER_USER === '' ? undefined : env.RECEIVER_USER) ?? raw.user;
  if (user !== undefined && !USER_NAME.test(user)) throw configError(`user: "${user}" is not a user name`, "name the service's user, e.g. receiver");
  const portText = overrides.port ?? env.RECEIVER_PORT;
  const port = portText === undefined ? raw.port : Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw configError(`port: ${String(portText)} is not a port number`, 'use a whole number from 0 to 65535');
  const level = overrides.logLevel ?? env.RECEIVER_LOG_LEVEL ?? raw.log.level;
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
  if (!levels.includes(level)) throw configError(`log.level: "${level}" is not a level`, `use one of ${levels.join(', ')}`);
  const format = overrides.logFormat ?? env.RECEIVER_LOG_FORMAT ?? raw.log.format;
  if (!isOneOf(LOG_FORMATS, format)) throw configError(`log.format: "${format}" is not a log format`, `use one of ${LOG_FORMATS.join(', ')}`);

  const problems: string[] = [];
  const sources = new Map<string, ResolvedSource>();
  const catchUp = new Map<string, CatchUpSettings>();
  for (const [name, options] of Object.entries(raw.sources)) {
    const field = `sources.${name}`;
    const provider = providers.get(options.provider);
    if (provider === undefined) {
      problems.push(`${field}.provider: unknown provider "${options.provider}" (known: ${providerNames().join(', ')})`);
      continue;
    }
    const unused = unusedFields(field, options, provider);
    if (unused.length > 0) {
      problems.push(...unused);
      continue;
    }
    // [config field, reference, key id for `keys` entries]
    const refs: [string, string, string?][] = [];
    if (overrides.withoutSecrets === true) {
      // Structure only: no secret is read, so none is required.
    } else {
      if (options.secret !== undefined) refs.push([`${field}.secret`, options.secret]);
      options.secrets?.forEach((s, i) => refs.push([`${field}.secrets.${i}`, s]));
    }
    const secrets: Secret[] = [];
    const keys = new Map<string, Secret>();
    for (const [kid, ref] of Object.entries(overrides.withoutSecrets === true ? {} : (options.keys ?? {}))) refs.push([`${field}.keys.${kid}`, ref, kid]);
    try {
      for (const [f, ref, kid] of refs) {
        const secret = resolveSecret(ref, f, env, read);
        // Usable key bytes, as this provider reads them: never an empty HMAC key.
        const problem = provider.keyProblem?.(secret.reveal(), options);
        if (problem !== undefined) throw configError(`${f}: ${problem}`);
        if (kid === undefined) secrets.push(secret);
        else keys.set(kid, secret);
      }
    } catch (e) {
      if (e instanceof ReceiverError) {
        problems.push(e.message + (e.hint === undefined ? '' : ` (try: ${e.hint})`));
        continue;
      }
      throw e;
    }
    // Never a silent accept-all: a verifying provider without a secret refuses to start.
    if (overrides.withoutSecrets !== true && provider.needsSecret && secrets.length === 0 && keys.size === 0) {
      problems.push(`${field}.secret: provider "${provider.name}" needs a secret (set "secret", "secrets" or "keys"; a literal, env:NAME or file:PATH)`);
      continue;
    }
    for (const p of provider.validate?.(options) ?? []) problems.push(`${field}.${p}`);
    if (options.catchUp !== undefined) {
      const settings = catchUpSettings(name, provider.name, options.catchUp, overrides.withoutSecrets === true, env, read, problems);
      if (settings !== undefined) catchUp.set(name, settings);
    }
    // The literal secret references stay behind: only Secret objects (which never print) go on.
    const { secret: _secret, secrets: _secrets, keys: _keys, catchUp: _catchUp, ...rest } = options;
    sources.set(name, {
      name,
      provider,
      options: rest,
      secrets: secrets.length > 0 ? secrets : [...keys.values()],
      keys,
      successStatus: options.successStatus ?? provider.successStatus,
      retryHorizonHours: options.retryHorizonHours ?? provider.retryHorizonHours,
      dedupeByBody:
        options.dedupeByBody ?? (typeof provider.unsignedDeliveryId === 'function' ? provider.unsignedDeliveryId(options) : provider.unsignedDeliveryId),
    });
  }

  const names = new Set<string>();
  const httpSecrets = new Map<string, HttpSecrets>();
  raw.routes.forEach((route, i) => {
    const field = `routes.${i}`;
    if (names.has(route.name))
      problems.push(`${field}.name: "${route.name}" is used by two routes; effect keys start with the route name, so names must be unique`);
    names.add(route.name);
    if (route.source !== '*' && !Object.hasOwn(raw.sources, route.source)) problems.push(`${field}.source: no source named "${route.source}"`);
    for (const f of ['key', 'version'] as const) {
      const t = route[f];
      const p = t === undefined ? undefined : checkTemplate(t);
      if (p !== undefined) problems.push(`${field}.${f}: ${p}`);
    }
    if (route.effect.http !== undefined) {
      const secrets = httpEffectSecrets(`${field}.effect.http`, route.effect.http, overrides.withoutSecrets === true, env, read, problems);
      if (secrets !== undefined) httpSecrets.set(route.name, secrets);
    }
    if (route.effect.env !== undefined) problems.push(...effectEnvProblems(`${field}.effect`, route.effect, overrides.withoutSecrets !== true, env));
  });

  let token: Secret | undefined;
  if (raw.metrics.token !== undefined && overrides.withoutSecrets !== true) {
    try {
      token = resolveSecret(raw.metrics.token, 'metrics.token', env, read);
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      problems.push(e.message);
    }
  }

  let admin: Config['admin'];
  if (raw.admin !== undefined && overrides.withoutSecrets !== true) {
    try {
      const adminToken = resolveSecret(raw.admin.token, 'admin.token', env, read);
      const length = adminToken.reveal().length;
      if (length < ADMIN_TOKEN_MIN_LENGTH) {
        problems.push(`admin.token: is ${length} characters long; it must be at least ${ADMIN_TOKEN_MIN_LENGTH} (try: openssl rand -hex 32)`);
      } else admin = { token: adminToken };
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      problems.push(e.message);
    }
  }

  const alerts = raw.alerts === undefined ? undefined : alertSettings(raw.alerts, overrides.withoutSecrets === true, env, read, problems);

  if (problems.length > 0)
    throw configError(`${file}: invalid configuration\n${problems.join('\n')}`, 'fix the fields named above, then run `receiver check-config`');

  return {
    ...raw,
    file,
    database: isPostgresUrl(database) || database === ':memory:' ? database : resolve(database),
    host,
    ...(user === undefined ? {} : { user }),
    // Against the working directory, as `database`: serve and reload must name the same file.
    ...(pidFile === undefined ? {} : { pidFile: resolve(pidFile) }),
    port,
    log: { ...raw.log, level: level as RawConfig['log']['level'], format },
    sources,
    metrics: { enabled: raw.metrics.enabled, token },
    admin,
    catchUp,
    httpSecrets,
    alerts,
  };
}

/** A source's `catchUp`, checked against its sender and with its credential resolved; problems are pushed. */
function catchUpSettings(
  name: string,
  provider: string,
  c: NonNullable<SourceConfig['catchUp']>,
  withoutSecrets: boolean,
  env: NodeJS.ProcessEnv,
  read: ReadText,
  problems: string[],
): CatchUpSettings | undefined {
  const field = `sources.${name}.catchUp`;
  const sender = catchUpSenders.get(provider);
  if (sender === undefined) {
    problems.push(
      `${field}: provider "${provider}" has no API that recovers missed deliveries (catch-up works with ${[...catchUpSenders.keys()].join(', ')}; see docs/operations.md, "Catch up after downtime")`,
    );
    return undefined;
  }
  const found = problems.length;
  const other = sender.credentialField === 'apiKey' ? 'token' : 'apiKey';
  if (c[other] !== undefined) problems.push(`${field}.${other}: ${sender.title} takes its credential in "${sender.credentialField}"`);
  const ref = c[sender.credentialField];
  if (ref === undefined)
    problems.push(`${field}.${sender.credentialField}: ${sender.title} catch-up needs an API credential with ${sender.permissions} (env:NAME or file:PATH)`);
  for (const p of sender.validate(c)) problems.push(`${field}.${p}`);
  let credential: Secret | undefined;
  if (ref !== undefined && !withoutSecrets) {
    try {
      credential = resolveSecret(ref, `${field}.${sender.credentialField}`, env, read);
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      problems.push(e.message);
    }
  }
  if (problems.length > found) return undefined;
  return {
    source: name,
    sender,
    credential,
    apiBase: c.apiBase ?? sender.defaultApiBase,
    everyMinutes: c.everyMinutes,
    maxRequests: c.maxRequests,
    maxEvents: c.maxEvents,
    timeoutMs: c.timeoutSeconds * 1000,
    maxRunMs: c.maxRunSeconds * 1000,
    maxResponseBytes: c.maxResponseBytes,
    hook: c.hook,
    notificationSettingId: c.notificationSettingId,
  };
}
