/** The single executable's program (scripts/build-binary.mjs bundles it): bin/receiver.js with its files carried inside. */
import { getAsset } from 'node:sea';
import { useContribFiles } from '../cli/contrib.js';
import { main, useBuildStamp } from '../cli/main.js';
import { useDrainWorkerSource } from '../drain/thread.js';
import { MODULE_HOST_ARG, runModuleHost } from '../effects/module-host.js';
import { READER_ARG, runPrivilegedReader, useReaderArgs } from '../config/reader.js';
import { useIngestWorkerSource } from '../store/sqlite/ingest-thread.js';
import { stamp } from './hooks.js';
import './importer.js';

// The drain starts the executable again, with an IPC channel, to run module effects (module-runner.ts).
if (process.argv[2] === MODULE_HOST_ARG && process.send !== undefined) runModuleHost();
// serve, started as root, starts it again as its privileged reader (src/config/reader.ts).
else if (process.argv[2] === READER_ARG && process.send !== undefined) runPrivilegedReader(process.argv[3] ?? '{}');
else {
  useReaderArgs([READER_ARG]);
  useBuildStamp(stamp.commit === undefined ? { version: stamp.version } : { version: stamp.version, commit: stamp.commit });
  useIngestWorkerSource(getAsset('ingest-worker.js', 'utf8'));
  useDrainWorkerSource(getAsset('drain-worker.mjs', 'utf8'));
  useContribFiles(JSON.parse(getAsset('contrib.json', 'utf8')) as Record<string, string>, process.execPath);
  void main(process.argv);
}
