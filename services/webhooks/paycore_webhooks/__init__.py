"""paycore webhooks service: placeholder until its issue lands (see README, 'Roadmap')."""
