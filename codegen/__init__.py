"""qsdpa's kernel generator: Jinja2 templates + the ISA registry -> generated/ C++ sources."""
