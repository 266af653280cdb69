/** Style sheets imported for their effect: esbuild bundles them into console.css. */
declare module '*.css';
