"""How to run one configuration and measure it. Launchers never import Ray."""
