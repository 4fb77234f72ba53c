import type { Command } from 'commander';
import { describeConfig } from '../config/describe.js';
import { addCommonOptions, configFrom, printJson, type CommonOptions } from './common.js';

export function registerCheckConfig(program: Command): void {
  addCommonOptions(program.command('check-config'))
    .description('validate the configuration and print the resolved sources and routes, secrets hidden')
    .option('--json', 'print one JSON document')
    .action((options: CommonOptions & { json?: boolean }) => {
      const description = describeConfig(configFrom(options));
      if (options.json === true) return printJson(description);
      const out: string[] = [`configuration ${description.file} is valid`, `database: ${description.database}`, `listen: ${description.listen}`, 'sources:'];
      for (const s of description.sources) out.push(`  ${s.name}: ${s.provider}, ${s.secrets} secret(s)${s.keyIds.length > 0 ? `, key ids ${s.keyIds.join(', ')}` : ''}, answers ${s.successStatus}, retry horizon ${s.retryHorizonHours} h`);
      out.push(`metrics: ${description.metrics.enabled ? `GET /metrics${description.metrics.token ? ' (bearer token required)' : ' (no token)'}` : 'off'}`);
      out.push('routes:');
      for (const r of description.routes) out.push(`  ${r.name}: ${r.source} [${r.events.join(', ')}] key ${r.key} -> ${JSON.stringify(r.effect)}`);
      process.stdout.write(`${out.join('\n')}\n`);
    });
}
