import { Writable } from 'node:stream';

/** One line of the service's JSON log. */
export interface LogLine {
  level: number;
  msg: string;
  reqId?: string;
  [key: string]: unknown;
}

/** A pino destination that keeps every line: pass `stream` as the logger's stream, read `lines()`. */
export function captureLogs() {
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw.push(
        ...chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''),
      );
      done();
    },
  });
  return { stream, raw, lines: () => raw.map((l) => JSON.parse(l) as LogLine) };
}
