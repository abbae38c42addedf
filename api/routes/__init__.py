"""The API's routers, one module per resource (health, projects, runs, trees, datasets, traces, events)."""
