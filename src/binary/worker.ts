/** The single executable's ingest worker: src/store/sqlite/ingest-worker.ts, with the addon from the executable. */
import './hooks.js';
import '../store/sqlite/ingest-worker.js';
