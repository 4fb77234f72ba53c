/**
 * Imported by the single executable's drain thread before the drain starts: module effects
 * run in the executable itself, started in its hidden module-host mode (see main.ts).
 */
import { MODULE_HOST_ARG } from '../effects/module-host.js';
import { useModuleHostArgs } from '../effects/module-runner.js';

useModuleHostArgs([MODULE_HOST_ARG]);
