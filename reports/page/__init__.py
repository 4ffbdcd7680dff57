"""`xbench report`: the walked sections as one HTML page and summary.md (page), the JSON report,
the build that writes them, and a page's screenshot. The last wing: may import every other."""
