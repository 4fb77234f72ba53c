/**
 * The single executable's drain thread (`serve`): src/drain/worker.ts, with better-sqlite3's
 * addon from the executable. Bundled as an ES module, unlike the program and the ingest
 * worker (CommonJS scripts): the drain worker awaits at its top level, which a CommonJS
 * script cannot. src/drain/thread.ts starts it from a data: URL (useDrainWorkerSource), and
 * in a module import() works as it is, so a module effect's file is imported without the
 * program's useModuleImporter.
 */
import './hooks.js';
import '../drain/worker.js';
