// Starts Swagger UI on /docs over the server's own OpenAPI schema. A file of its own (not an inline
// script) so that the server's Content-Security-Policy (script-src 'self') lets it run.
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
});
