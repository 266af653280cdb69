/** The /console routes: the operator console's page and its assets. */
export { consoleRoutes } from './console.routes.js';
