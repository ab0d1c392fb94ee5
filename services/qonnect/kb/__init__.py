"""The Knowledge Base: the federation's single source of truth, served over HTTP.

``app.create_app`` builds the FastAPI application, ``storage`` hides SQLite and PostgreSQL behind
one small interface, ``writer`` commits all writes in groups from one thread, ``cli`` registers
``qonnect kb``.
"""
