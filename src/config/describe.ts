import type { Config } from './load.js';
import { redactUrl } from '../log.js';

/** The resolved configuration with every secret replaced by a count. */
export function describeConfig(config: Config) {
  return {
    file: config.file,
    database: redactUrl(config.database),
    listen: `${config.host}:${config.port}`,
    maxBodyBytes: config.maxBodyBytes,
    sources: [...config.sources.values()].map((s) => ({
      name: s.name,
      provider: s.provider.name,
      secrets: s.secrets.length,
      keyIds: [...s.keys.keys()],
      successStatus: s.successStatus,
      retryHorizonHours: s.retryHorizonHours,
      onConflict: s.options.onConflict,
      dedupeByBody: s.dedupeByBody,
      ...catchUpOf(config, s.name),
    })),
    routes: config.routes.map((r) => ({
      name: r.name,
      source: r.source,
      events: r.events,
      key: r.key,
      ...(r.version === undefined ? {} : { version: r.version }),
      ...(r.filter === undefined ? {} : { filter: r.filter }),
      // An http effect's headers may carry a credential: only their names are shown; its signing secret only as set.
      effect:
        r.effect.exec !== undefined
          ? { exec: r.effect.exec, ...(r.effect.env === undefined ? {} : { env: r.effect.env }) }
          : r.effect.http !== undefined
            ? {
                http: redactUrl(r.effect.http.url),
                ...(r.effect.http.headers === undefined ? {} : { headers: Object.keys(r.effect.http.headers) }),
                ...(r.effect.http.sign === undefined ? {} : { sign: true }),
              }
            : { module: r.effect.module },
      timeoutSeconds: r.effect.timeoutSeconds,
    })),
    retry: config.retry,
    drain: config.drain,
    log: config.log,
    metrics: { enabled: config.metrics.enabled, token: config.metrics.token !== undefined },
    shutdownGraceSeconds: config.shutdownGraceSeconds,
    requestTimeoutSeconds: config.requestTimeoutSeconds,
  };
}

/** A source's catchUp settings, its credential shown only as present. */
function catchUpOf(config: Config, name: string) {
  const c = config.catchUp.get(name);
  if (c === undefined) return {};
  const target = c.hook ?? c.notificationSettingId;
  return {
    catchUp: {
      apiBase: redactUrl(c.apiBase),
      everyMinutes: c.everyMinutes,
      maxRequests: c.maxRequests,
      ...(target === undefined ? {} : { target }),
      credential: c.credential !== undefined,
    },
  };
}
