"""Built-in components. Each module is a plugin registering its kinds through the hooks."""
