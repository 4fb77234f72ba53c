/** The single executable's program (scripts/build-binary.mjs bundles it): bin/receiver.js with its files carried inside. */
import { getAsset } from 'node:sea';
import { Script, constants } from 'node:vm';
import { main, useBuildStamp } from '../cli/main.js';
import { useModuleImporter } from '../effects/module.js';
import { useDrainWorkerSource } from '../drain/thread.js';
import { useIngestWorkerSource } from '../store/sqlite/ingest-thread.js';
import { stamp } from './hooks.js';

useBuildStamp(stamp.commit === undefined ? { version: stamp.version } : { version: stamp.version, commit: stamp.commit });
useIngestWorkerSource(getAsset('ingest-worker.js', 'utf8'));
useDrainWorkerSource(getAsset('drain-worker.mjs', 'utf8'));
// The executable's own script has no import() (no loader callback): module effects are
// imported by a small script compiled with Node's default ESM loader. Its one-time
// "experimental" warning would be a line on stderr that is not JSON: dropped. (serve runs
// module effects in its drain thread, an ES module with an import() of its own: this one
// serves an effect run from this thread.)
useModuleImporter(new Script('(url) => import(url)', { importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER }).runInThisContext() as (url: string) => Promise<{ default?: unknown }>);
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = ((warning: string | Error, ...rest: never[]) => {
  if ((typeof warning === 'string' ? warning : warning.message).includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return;
  emitWarning(warning, ...rest);
}) as typeof process.emitWarning;
void main(process.argv);
