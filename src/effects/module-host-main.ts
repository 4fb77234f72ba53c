/** The module host's script (module-runner.ts starts it with node): see module-host.ts. */
import { runModuleHost } from './module-host.js';

runModuleHost();
