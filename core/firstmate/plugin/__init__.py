"""The plugin layer: values that cross the hook boundary, the hook specifications (in lifecycle
order), the plugin manager, the base classes and install specs plugins are made of, and which
process is which harness (from what plugins declare).
"""
