"""The KB's read-only status page: static HTML, JavaScript and CSS served at /ui (no build step)."""
