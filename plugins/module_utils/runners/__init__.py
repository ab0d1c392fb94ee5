"""What each module does: one runner per module, a function of a QonnectModule returning the
module's result (module_utils/module.py runs it and reports the result or the error)."""
