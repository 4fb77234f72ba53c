import type { Command } from 'commander';
import type { Config } from '../config/load.js';
import { redactUrl } from '../log.js';
import { addCommonOptions, configFrom, printJson, type CommonOptions } from './common.js';

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
      ...catchUpOf(config, s.name),
    })),
    routes: config.routes.map((r) => ({
      name: r.name,
      source: r.source,
      events: r.events,
      key: r.key,
      ...(r.version === undefined ? {} : { version: r.version }),
      ...(r.filter === undefined ? {} : { filter: r.filter }),
      // An http effect's headers may carry a credential: only their names are shown.
      effect:
        r.effect.exec !== undefined
          ? { exec: r.effect.exec }
          : r.effect.http !== undefined
            ? { http: redactUrl(r.effect.http.url), ...(r.effect.http.headers === undefined ? {} : { headers: Object.keys(r.effect.http.headers) }) }
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
  return { catchUp: { apiBase: redactUrl(c.apiBase), everyMinutes: c.everyMinutes, maxRequests: c.maxRequests, ...(target === undefined ? {} : { target }), credential: c.credential !== undefined } };
}

export function registerCheckConfig(program: Command): void {
  addCommonOptions(program.command('check-config'))
    .description('validate the configuration and print the resolved sources and routes, secrets hidden')
    .option('--json', 'print one JSON document')
    .action((options: CommonOptions & { json?: boolean }) => {
      const description = describeConfig(configFrom(options));
      if (options.json === true) return printJson(description);
      const out: string[] = [`configuration ${description.file} is valid`, `database: ${description.database}`, `listen: ${description.listen}`, 'sources:'];
      for (const s of description.sources) {
        const catchUp = 'catchUp' in s && s.catchUp !== undefined ? `, catch-up every ${s.catchUp.everyMinutes} min from ${s.catchUp.apiBase}` : '';
        out.push(`  ${s.name}: ${s.provider}, ${s.secrets} secret(s)${s.keyIds.length > 0 ? `, key ids ${s.keyIds.join(', ')}` : ''}, answers ${s.successStatus}, retry horizon ${s.retryHorizonHours} h${catchUp}`);
      }
      out.push(`metrics: ${description.metrics.enabled ? `GET /metrics${description.metrics.token ? ' (bearer token required)' : ' (no token)'}` : 'off'}`);
      out.push('routes:');
      for (const r of description.routes) out.push(`  ${r.name}: ${r.source} [${r.events.join(', ')}] key ${r.key} -> ${JSON.stringify(r.effect)}`);
      process.stdout.write(`${out.join('\n')}\n`);
    });
}
