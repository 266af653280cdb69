/**
 * The TypeScript snippets of a Markdown guide. Each ```ts block names the file it is in an adopter's
 * application (`ts file=schema.ts`); those that also say `run` are programs the guide asks the reader to
 * run (`ts file=try-it.ts run`). Snippets import the library by its package names and each other as
 * `./name.js`, as an application's files do.
 */
export interface Snippet {
  /** The file name the snippet is written to (a bare `name.ts`). */
  readonly file: string;
  /** The guide asks for it to be run. */
  readonly run: boolean;
  readonly code: string;
  /** The guide's line of the snippet's first line of code (1-based). */
  readonly line: number;
}

/** The snippets of `markdown`, in order; throws naming the line of a TypeScript block that says no file, or a file named twice. */
export function guideSnippets(markdown: string): Snippet[] {
  const snippets: Snippet[] = [];
  const fence = /^```(ts|typescript)\b([^\n]*)\n([\s\S]*?)^```[ \t]*$/gm;
  for (const match of markdown.matchAll(fence)) {
    const line = markdown.slice(0, match.index).split('\n').length + 1;
    const words = match[2]!.trim().split(/\s+/).filter(Boolean);
    const file = words.find((word) => word.startsWith('file='))?.slice('file='.length);
    if (file === undefined || !/^[a-z0-9-]+\.ts$/.test(file)) {
      throw new Error(`line ${line - 1}: a TypeScript snippet needs file=<name>.ts after its language (\`\`\`ts file=app.ts)`);
    }
    const unknown = words.filter((word) => !word.startsWith('file=') && word !== 'run');
    if (unknown.length > 0) throw new Error(`line ${line - 1}: unknown snippet attribute ${unknown.join(' ')}`);
    if (snippets.some((snippet) => snippet.file === file)) throw new Error(`line ${line - 1}: ${file} is named by two snippets`);
    snippets.push({ file, run: words.includes('run'), code: match[3]!, line });
  }
  return snippets;
}
