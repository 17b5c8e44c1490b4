"""Plugin categories: the vocabulary the store and plugin manifests use."""
