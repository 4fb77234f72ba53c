/**
 * The single executable's drain thread (`serve`): src/drain/worker.ts, with better-sqlite3's
 * addon from the executable and its import() for module effects (importer.ts says why).
 * Bundled as an ES module, unlike the program and the ingest worker (CommonJS scripts):
 * the drain worker awaits at its top level, which a CommonJS script cannot.
 * src/drain/thread.ts starts it from a data: URL (useDrainWorkerSource); the bundle ends
 * with a sourceURL, so its stack frames name receiver:drain-worker.mjs, not that URL.
 * Module effects run in the executable itself, in its hidden module-host mode (module-host.ts).
 */
import './hooks.js';
import './importer.js';
import './module-host.js';
import '../drain/worker.js';
