"""Mixture-of-experts: dispatch and combine as DeepEP runs them, and token-drop capacity factors."""
