/** The HTTP schema compiler is the service's own (strict bodies, coerced text parts): see src/validation/compile.ts. */
export { buildValidatorCompiler } from '../validation/compile.js';
