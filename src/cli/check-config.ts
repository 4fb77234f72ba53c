import type { Command } from 'commander';
import { describeConfig } from '../config/describe.js';
import { addCommonOptions, configFrom, printJson, type CommonOptions } from './common.js';
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

/** `receiver check-config`: a configuration error is thrown (exit 2); else the resolved configuration, secrets hidden. */
export function checkConfig(options: CheckConfigOptions, io: CliIo): void {
  const description = describeConfig(configFrom(options, io.env));
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
  io.stdout.write(`${out.join('\n')}\n`);
}
