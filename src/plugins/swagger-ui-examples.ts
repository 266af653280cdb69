/**
 * A script served with Swagger UI (/docs/static/theme/examples.js) so that every walkthrough example
 * succeeds as a person clicks it: choose the example, Try it out, Execute.
 *
 * - One list per operation: the CloudEvents structured-mode examples (media type
 *   application/cloudevents+json in the document) join the JSON examples, in step order, and are sent
 *   with their own Content-Type. Swagger UI otherwise hides them behind a media-type switch that,
 *   used after "Try it out", replaces the body with a placeholder. Both media types keep the one list,
 *   and choosing an example switches the media-type field to the type it is sent as (without touching
 *   the body), so the page shows application/cloudevents+json for a structured CloudEvent. Only the
 *   page's copy of the document changes: /docs/json and openapi/openapi.json keep each example under
 *   its media type.
 * - The headers an example carries its key in (`x-request-headers` on the example: Idempotency-Key,
 *   ce-*, webhook-id) are added to the request when that example is executed, unless the person typed
 *   a value of their own; header values another example documents are not sent with this one.
 *   The curl command and the request URL Swagger UI shows are those of the request as sent.
 *
 * It runs in the browser, after swagger-ui-bundle.js and before the page's onload creates the UI, and
 * wraps SwaggerUIBundle to add its plugin and request interceptor to the configuration.
 */
export const SWAGGER_UI_EXAMPLES_SCRIPT = String.raw`(function () {
  'use strict';
  var JSON_TYPE = 'application/json';
  var CLOUD_EVENTS_TYPE = 'application/cloudevents+json';
  var METHODS = ['get', 'put', 'post', 'delete', 'patch'];
  var original = window.SwaggerUIBundle;
  if (typeof original !== 'function') return;
  var system;

  /** The page's copy of the document: each operation's CloudEvents examples merged into its JSON list. */
  function mergeExamples(spec) {
    if (!spec || typeof spec !== 'object' || !spec.paths || spec['x-examples-merged']) return spec;
    var copy = JSON.parse(JSON.stringify(spec));
    copy['x-examples-merged'] = true;
    Object.keys(copy.paths).forEach(function (path) {
      METHODS.forEach(function (method) {
        var operation = copy.paths[path][method];
        var content = operation && operation.requestBody && operation.requestBody.content;
        if (!content || !content[JSON_TYPE] || !content[CLOUD_EVENTS_TYPE]) return;
        var json = content[JSON_TYPE];
        var cloudEvents = content[CLOUD_EVENTS_TYPE];
        var entries = [];
        Object.keys(json.examples || {}).forEach(function (name) {
          entries.push([name, json.examples[name]]);
        });
        Object.keys(cloudEvents.examples || {}).forEach(function (name) {
          var example = Object.assign({}, cloudEvents.examples[name]);
          example['x-request-headers'] = Object.assign({ 'content-type': CLOUD_EVENTS_TYPE }, example['x-request-headers']);
          entries.push(['cloudEvents-' + name, example]);
        });
        // The summaries start with their step ("Step 2c: …"): that is the order a person follows.
        entries.sort(function (a, b) {
          return String(a[1].summary || '').localeCompare(String(b[1].summary || ''));
        });
        var merged = {};
        entries.forEach(function (entry) {
          merged[entry[0]] = entry[1];
        });
        var schema = { anyOf: [json.schema, cloudEvents.schema] };
        json.examples = merged;
        json.schema = schema;
        // The same list under both media types: switching the type keeps the chosen example and its body.
        cloudEvents.examples = JSON.parse(JSON.stringify(merged));
        cloudEvents.schema = schema;
      });
    });
    return copy;
  }

  function namesOf(headers, name) {
    return Object.keys(headers).filter(function (key) {
      return key.toLowerCase() === name;
    });
  }

  /** Adds the chosen example's headers to the request about to be sent. */
  function applyExampleHeaders(request) {
    if (!system || !request || !request.url) return request;
    var url = new URL(request.url, window.location.href);
    var path = url.pathname;
    var method = String(request.method || 'get').toLowerCase();
    var found = system.specSelectors.specJson().getIn(['paths', path, method, 'requestBody', 'content', JSON_TYPE, 'examples']);
    if (!found) return request;
    var examples = found.toJS();
    var names = Object.keys(examples);
    var active = system.oas3Selectors.activeExamplesMember(path, method, 'requestBody', 'requestBody') || names[0];
    var chosen = (examples[active] && examples[active]['x-request-headers']) || {};
    var headers = Object.assign({}, request.headers);
    // A value another example documents, left in a field when that example was tried: not for this one.
    names.forEach(function (name) {
      if (name === active) return;
      var other = examples[name]['x-request-headers'] || {};
      Object.keys(other).forEach(function (header) {
        if (header === 'content-type' || Object.prototype.hasOwnProperty.call(chosen, header)) return;
        namesOf(headers, header).forEach(function (key) {
          if (headers[key] === other[header]) delete headers[key];
        });
      });
    });
    Object.keys(chosen).forEach(function (header) {
      var present = namesOf(headers, header);
      var typed = present.some(function (key) {
        return headers[key] !== '' && headers[key] !== undefined;
      });
      if (header !== 'content-type' && typed) return;
      present.forEach(function (key) {
        delete headers[key];
      });
      headers[header === 'content-type' ? 'Content-Type' : header] = chosen[header];
    });
    request.headers = headers;
    return request;
  }

  /** The media type an example is sent as: its documented content-type header, else JSON. */
  function mediaTypeOf(path, method, name) {
    var example = system.specSelectors.specJson().getIn(['paths', path, method, 'requestBody', 'content', JSON_TYPE, 'examples', name]);
    var headers = (example && example.toJS()['x-request-headers']) || {};
    var type = namesOf(headers, 'content-type').map(function (key) {
      return headers[key];
    })[0];
    return type || JSON_TYPE;
  }

  function examplesPlugin(pluginSystem) {
    system = pluginSystem;
    return {
      statePlugins: {
        oas3: {
          wrapActions: {
            // Choosing a request-body example also shows the media type it is sent as.
            setActiveExamplesMember: function (next) {
              return function (payload) {
                var result = next(payload);
                if (!payload || payload.contextType !== 'requestBody' || !payload.pathMethod) return result;
                var path = payload.pathMethod[0];
                var method = payload.pathMethod[1];
                var content = system.specSelectors.specJson().getIn(['paths', path, method, 'requestBody', 'content']);
                if (!content || !content.get(CLOUD_EVENTS_TYPE)) return result;
                var type = mediaTypeOf(path, method, payload.name);
                if (system.oas3Selectors.requestContentType(path, method) !== type) {
                  system.oas3Actions.setRequestContentType({ value: type, pathMethod: payload.pathMethod });
                }
                return result;
              };
            },
          },
        },
        spec: {
          wrapActions: {
            updateJsonSpec: function (next) {
              return function (spec) {
                return next(mergeExamples(spec));
              };
            },
          },
        },
      },
    };
  }

  function withExamples(config) {
    var previous = config.requestInterceptor;
    return original(
      Object.assign({}, config, {
        plugins: (config.plugins || []).concat([examplesPlugin]),
        requestInterceptor: function (request) {
          var applied = applyExampleHeaders(request);
          return typeof previous === 'function' ? previous(applied) : applied;
        },
      }),
    );
  }
  Object.keys(original).forEach(function (key) {
    withExamples[key] = original[key];
  });
  window.SwaggerUIBundle = withExamples;
})();
`;
