import { Type } from 'typebox';

/** The console's two assets, by name. */
export const AssetParams = Type.Object(
  { file: Type.Union([Type.Literal('console.js'), Type.Literal('console.css')], { description: 'console.js or console.css' }) },
  { additionalProperties: false },
);
