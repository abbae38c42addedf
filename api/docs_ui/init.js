// Starts Swagger UI on this server's OpenAPI document (a file, not an inline script: the CSP
// allows scripts from this origin only).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
