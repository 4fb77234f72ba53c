import type { Command } from 'commander';
import { describeConfig } from '../config/describe.js';
import { isPostgresUrl } from '../config/database.js';
import { assertRunnable } from '../config/check.js';
import { effectsLongerThanGrace } from '../config/grace.js';
import { exposedSecretFiles } from '../config/secret-files.js';
import { configuredExposure } from '../config/service-user.js';
import { plainApiBases } from '../catchup/warnings.js';
import { processUser } from '../store/sqlite/open.js';
import { addCommonOptions, configAndEnvFrom, printJson, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

interface CheckConfigOptions extends CommonOptions {
  json?: boolean;
}

export function registerCheckConfig(program: Command, io: CliIo): void {
  addCommonOptions(program.command('check-config'))
    .description('validate the configuration and print the resolved sources and routes, secrets hidden')
    .option('--json', 'print one JSON document')
    .action((options: CheckConfigOptions) => checkConfig(options, io));
}

/**
 * `receiver check-config`: a configuration error is thrown (exit 2); so is a problem the
 * first event would meet (a missing program or module, a database directory this user
 * cannot write: see preflight); else the resolved configuration, secrets hidden.
 */
async function checkConfig(options: CheckConfigOptions, io: CliIo): Promise<void> {
  const { config, env } = configAndEnvFrom(options, io.env);
  await assertRunnable(config, { cwd: process.cwd(), env });
  // Valid, but a secret every user can read: said on stderr, as ssh does; still exit 0.
  for (const f of exposedSecretFiles(config)) io.stderr.write(`Warning: ${f.message}\n`);
  const exposure = configuredExposure(config);
  if (exposure !== undefined) io.stderr.write(`Warning: ${exposure.message}; ${exposure.fix}\n`);
  for (const w of plainApiBases(config.catchUp)) io.stderr.write(`Warning: ${w.message}\n`);
  for (const w of effectsLongerThanGrace(config)) io.stderr.write(`Warning: ${w.message}\n`);
  const description = describeConfig(config);
  if (options.json === true) return printJson(io.stdout, description);
  const out: string[] = [`configuration ${description.file} is valid`, `database: ${description.database}`, `listen: ${description.listen}`, 'sources:'];
  for (const s of description.sources) {
    const catchUp = 'catchUp' in s && s.catchUp !== undefined ? `, catch-up every ${s.catchUp.everyMinutes} min from ${s.catchUp.apiBase}` : '';
    out.push(
      `  ${s.name}: ${s.provider}, ${s.secrets} secret(s)${s.keyIds.length > 0 ? `, key ids ${s.keyIds.join(', ')}` : ''}, answers ${s.successStatus}, retry horizon ${s.retryHorizonHours} h${catchUp}`,
    );
  }
  out.push(`metrics: ${description.metrics.enabled ? `GET /metrics${description.metrics.token ? ' (bearer token required)' : ' (no token)'}` : 'off'}`);
  out.push('routes:');
  for (const r of description.routes) out.push(`  ${r.name}: ${r.source} [${r.events.join(', ')}] key ${r.key} -> ${JSON.stringify(r.effect)}`);
  const database = isPostgresUrl(config.database) ? ', the database answers' : config.database === ':memory:' ? '' : ', the database directory writable';
  out.push(`checked as ${processUser()}: exec programs found and executable, modules load${database}`);
  io.stdout.write(`${out.join('\n')}\n`);
}
