/**
 * import() for module effects inside the single executable, installed by its program and
 * its drain thread. The program's own script has no import() (no loader callback); the
 * drain thread, an ES module, has one, but its URL is the whole bundle as a data: URL, and
 * Node names the importing module in a failed import's message ("Cannot find module ...
 * imported from <that URL>"): megabytes in a log line and an attempt's stored error. So
 * both import through a small script compiled with Node's default ESM loader, named
 * receiver:module-importer. Its one-time "experimental" warning would be a line on stderr
 * that is not JSON: dropped.
 */
import { Script, constants } from 'node:vm';
import { useModuleImporter } from '../effects/module.js';

useModuleImporter(
  new Script('(url) => import(url)', {
    filename: 'receiver:module-importer',
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  }).runInThisContext() as (url: string) => Promise<{ default?: unknown }>,
);
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = (warning: string | Error, ...rest: never[]) => {
  if ((typeof warning === 'string' ? warning : warning.message).includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return;
  emitWarning(warning, ...rest);
};
